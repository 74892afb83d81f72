// Package kparules holds the Knative KPA reconciler's arithmetic as pure
// functions: scale bounds and initial scale, the scale-to-zero decision with
// its grace period, pod retention and activation timeout, the SKS mode and
// activator count, and the PodAutoscaler's Active and ScaleTargetInitialized
// conditions (knative.dev/serving v0.50.0
// pkg/reconciler/autoscaling/kpa).
//
// Nothing here talks to Kubernetes or reads a clock: condition ages and the
// activator probe are inputs, and the result says what to patch, what status
// to write and when to come back. The actuator's controller applies it.
package kparules
