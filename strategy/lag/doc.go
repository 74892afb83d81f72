// Package lag decides replica counts for functions fed by a Kafka topic, from
// the lag of their consumer group: riff's two algorithms (riff-offset, v0.0.5;
// riff-queue, v0.0.6+) and KEDA's Kafka scaler semantics (keda).
//
// The package is pure: no I/O, no clock, no goroutine. The decider reports
// per-partition offsets and the replica count with Set.Observe, calls
// Set.Tick once per tick for every target with the wall-clock time, and hands
// the results to the actuator. Every Decision carries the intermediates that
// Explain shows (per-partition lag, the proposal, smoothing, idle deadline,
// the cap and why).
//
// The collector's KEDA external scaler runs keda mode too, one
// Scaler.Decide per KEDA poll (collector/kedascaler), so the package is a
// lower layer both services share rather than part of the decider's tree.
//
// Each mode runs in one of two flavours. Faithful reproduces the original's
// numbers, faults included; the conformance replay uses it. The default
// (Faithful=false) fixes the known faults listed in docs/lag.md: a stale
// Deployment status, a failed Scale that is never retried, a Kafka error read
// as a non-empty queue, and one hot partition driving the function to the cap.
package lag
