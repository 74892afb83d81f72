// Package podmodel is a queueing model of a request-driven workload's pods,
// pure and stepped with the time passed in: requests arrive following a
// Profile, go to the least-loaded warm pod, are served ContainerConcurrency
// at a time per pod and queue beyond that, and a new pod serves only after a
// cold-start delay. Each pod reports what Knative's queue-proxy reports
// (collector/queuestat.Stat) every reporting period, and Report says what
// users would have felt.
//
// test/workload serves these numbers at simulated pods' addresses for the
// tests and `make run`; the what-if simulator (package sim, tidal-sim) runs
// the same model in virtual time.
package podmodel
