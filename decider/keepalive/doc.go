// Package keepalive is the predictive keep-alive and pre-warm policy of a
// request-driven (KPA) target that may scale to zero, after Shahrad et al.,
// "Serverless in the Wild" (USENIX ATC 2020, §4.2, the hybrid histogram
// policy): learn the target's idle times, the gaps between the end of one
// busy period and the next request, in a histogram of minute bins over four
// hours, and when they are predictable keep the target at zero after a busy
// period, pre-warm one pod shortly before the head of the distribution (its
// 5th percentile) and keep it until past the tail (its 99th percentile).
// When they are not predictable (too few idle times, a histogram too flat or
// too spread out to tell, a tail beyond its range) the policy stands aside
// and the target keeps Knative's fixed scale-to-zero grace.
//
// The policy only acts while the target is idle: while requests arrive,
// Knative's windows, panic mode and rate limits decide, untouched. The
// policy's memory (State) is small and bounded: a histogram of at most
// 1,024 idle times (older ones fade by halving) and the time of the last
// request, encoded in under 1 KiB so the actuator can keep it in the
// target's PodAutoscaler status and a restarted decider can rebuild it.
//
// Nothing here reads a clock, starts a goroutine or does I/O: time is an
// argument, as in decider/kpa.
package keepalive
