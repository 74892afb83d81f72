// Package sim replays a load trace through tidal's own scaling code in
// virtual time, to compare configurations on real traffic: "what would this
// target, window or scale-down delay have cost, and how many cold starts
// would users have seen?".
//
// Nothing is re-implemented: the decider is decider/engine (with decider/kpa
// and strategy/lag) driven as services/decider drives it, the KPA samples
// are built by collector/scrape's own sample choice and extrapolation, and
// the actuator's reconcile is actuator/kparules.Reconcile fed the state the
// actuator keeps (the PodAutoscaler's Active condition and its age, its
// desired scale, ScaleTargetInitialized). Pods follow sim/podmodel, the
// model `make run` serves its simulated queue-proxies from; a lag target's
// records follow a partition model here (lagModel).
//
// One replay, in virtual time from a fixed start on the 2 s grid:
//
//   - at every whole second the collector scrapes the ready pods (the
//     queue-proxy stats the model reports) and, while requests wait with no
//     warm pod, an activator pushes their count, which may poke the decider
//     (as hack/run's activator does, every second);
//   - at every 2 s grid time the decider ticks (KPA), or at the target's own
//     interval (lag: the collector reads the partitions, then the decider
//     ticks);
//   - every decision goes to the actuator, which reconciles on it, on every
//     ready-pod change, and on the requeues its rules ask for (the 1 ms echo
//     of its own status writes included);
//   - a scale-up creates pods that are Ready after pods.readyDelay and serve
//     after pods.coldStart more; a scale-down removes not-ready pods first,
//     then the most recently ready, as a ReplicaSet does.
//
// The same trace, seed and configuration give the same result, byte for
// byte: every random choice (arrival placement, the scraper's sample,
// exponential service times) is seeded.
package sim
