// Package kedascaler serves KEDA's external scaler protocol
// (externalscaler.ExternalScaler) from the collector, so that a ScaledObject
// trigger of type external or external-push can use tidal's decisions.
//
// A trigger's metadata picks one of two modes. Following a tidal target
// (podAutoscaler or function) answers with the latest decision of that
// target's owning decider: the metric is the desired replica count against a
// target of 1, so the HPA KEDA creates lands on tidal's number, and
// StreamIsActive pushes activity as decisions arrive. Inline Kafka
// (bootstrapServers and KEDA's other kafka trigger keys) is parsed and
// checked here; measuring it is not served yet.
//
// Any collector replica answers for any target: the decider that owns a
// target is found by the same rendezvous hashing the collector streams with,
// and asked over the collector's own connection to it (Router).
package kedascaler
