// Package kedascaler serves KEDA's external scaler protocol
// (externalscaler.ExternalScaler) from the collector, so that a ScaledObject
// trigger of type external or external-push can use tidal's decisions.
//
// A trigger's metadata picks one of two modes. Following a tidal target
// (podAutoscaler or function) answers with the latest decision of that
// target's owning decider: the metric is the desired replica count against a
// target of 1, so the HPA KEDA creates lands on tidal's number, and
// StreamIsActive pushes activity as decisions arrive. Any collector replica
// answers for any target: the decider that owns a target is found by the
// same rendezvous hashing the collector streams with, and asked over the
// collector's own connection to it (Router).
//
// Inline Kafka (bootstrapServers and KEDA's other kafka trigger keys) makes
// the trigger a target of its own (Triggers): kind ScaledObject, named after
// the ScaledObject and a hash of the metadata that defines the measurement,
// measured by the collector's lag reader, decided and explained by a decider
// but never actuated (advisory: KEDA and its HPA scale the workload). Only
// the collector replica owning the target's bucket measures it; the others
// forward KEDA's calls to it (KEDATargetService). In the riff modes the
// lag is read at the mode's interval and the answers are the decider's
// desired replicas, as when following. In keda mode (the default) the
// answers are KEDA's own, poll by poll:
//
//   - One poll is one GetMetrics call. The owning replica reads the
//     group's committed offsets and the topic's end offsets at that moment,
//     runs KEDA's Kafka arithmetic on them (tidal's keda mode, the code the
//     conformance replay checks against KEDA's vectors) with the state the
//     trigger's earlier polls left (excludePersistentLag compares with the
//     previous poll), and answers KEDA's metric, the capped total lag,
//     against a target of lagThreshold. The offsets go to the decider too.
//   - IsActive answers the activity of the trigger's latest poll when that
//     poll is at most Config.ActivityReuse old (KEDA's
//     GetMetricsAndActivity calls GetMetrics, then IsActive at once); else
//     it is a poll itself.
//   - GetMetricSpec and StreamMetricSpec never poll; a GetMetrics naming
//     another metric than the trigger's is refused before anything is read,
//     so it is no poll.
//   - StreamIsActive (external-push) reads the offsets every
//     Config.StreamPoll and sends KEDA's activity of them when it changes.
//     Activity depends on the offsets alone, so these reads use a scaler
//     of their own and are no polls.
//
// So a client drives one poll with one GetMetrics (and reads its activity
// with the IsActive right after it), and the state moves only then: the
// same offsets given to tidal's keda mode in the same order give the same
// metric and activity. A read that fails is UNAVAILABLE, never zero lag.
package kedascaler
