// Package kpa is the pure core of tidal's Knative Pod Autoscaler strategy: the
// per-target decision math of Knative Serving's autoscaler (Scale), its
// decider status and poke rule, and a Set that holds every target and is
// driven by one tick loop owned by the caller.
//
// Nothing here reads a clock, starts a goroutine or does I/O: time, ready pod
// counts and stats are arguments. Every Decision carries its inputs, its
// intermediates and each clamp that changed the number, so a decision can be
// explained and replayed exactly. The behaviour follows knative.dev/serving v0.50.0
// pkg/autoscaler/scaling (autoscaler.go, multiscaler.go).
package kpa
