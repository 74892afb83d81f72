// Package lag reads the consumer lag of lag targets from Kafka with franz-go
// (kgo's sharded requests, kadm's listings): per partition the log-end offset
// (high-water mark) and the consumer group's committed offset, and the
// topic's partition count, as riff's autoscaler and KEDA's Kafka scaler read
// them. Targets are grouped by Kafka cluster; each tick, one ListOffsets per
// partition leader and one OffsetFetch per group coordinator serve every due
// target of a cluster, so the cost grows with brokers, not with targets. A
// broker error puts the affected targets in an error state, never a zero or
// guessed lag.
package lag
