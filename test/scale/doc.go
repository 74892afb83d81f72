// Package scale runs the whole of tidal at scale on one machine and measures
// it end to end: a test cluster (test/cluster), the collector, decider and
// actuator as processes (test/system), thousands of KPA targets whose pods
// serve simulated queue-proxy metrics from this one process, lag targets
// reading topics on kfake, load that switches between two levels, and the
// readers a deployment has beside the loop (a WatchDecisions stream and a
// ListDecisions poll every tick, on every decider). Run returns a Report:
// how long creation and the first decisions took, how long a load change
// took to reach a Deployment's spec.replicas and how many never did, that
// latency split into the strategy's own part and the system's, how the
// targets whose load never changed moved, what each service process cost
// (CPU, RSS, goroutines, warnings and errors), and the API server's writes
// by client.
//
// # The strategy's part and the system's
//
// The collector's samples of every switching target are read back through
// its GetWindow and replayed offline through decider/engine, every sample on
// time (replayStrategy): the tick at which the strategy itself moves towards
// a change's new level is the strategy's part; from there to the
// Deployment informer's first move is what tidal and the API server added,
// split at the live decider's tick (from the WatchDecisions stream), the
// actuator's status write and its scale write (received and answered, from
// the API server's audit log, which the run's cluster must keep:
// AuditPolicy). Percentiles are over every change, the lost ones counted as
// never (Dist).
//
// `make scale` runs it at 10,000 KPA and 1,000 lag targets
// (test/scale/cmd/scale); TestScaleGuard runs 300 targets in `make test` and
// fails when a load change is lost or applied late.
//
// # Loads and what they imply
//
// Every KPA target has two load levels, low and high, chosen per target so
// that each implies a different replica count within Config.MinPods to
// Config.MaxPods. A level of n pods offers a total concurrency of
// (n − ½) × the per-pod target (Knative's default: 100 × 70 % = 70), spread
// evenly over the target's pods that the collector scraped in the last two
// seconds (podFarm says why), so the KPA's desired scale is exactly n
// however many pods run. Targets start at their low level with that many
// replicas; a fraction of them switch between the levels every
// Config.SwitchPeriod, staggered over the period.
//
// # Load change → spec.replicas
//
// A change at t0 from a level of a pods to one of b pods is applied at the
// first change of the Deployment's spec.replicas after t0 in the direction of
// b − a, as a Deployment informer in this process sees it. It is lost when
// no such change comes before the target's next load change (or the end of
// the run; the last change of every target is at least one period before the
// end). Changes at t0 when spec.replicas already equals b are counted apart
// and not measured. The report also gives the time until spec.replicas first
// equals b (a scale-down takes several ticks under max-scale-down-rate 2).
package scale
