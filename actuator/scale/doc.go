// Package scale applies deciders' decisions to targets: idempotently, in
// sequence order per target, and never from a decision older than the last
// one applied. Where the replicas live is behind the Scaler interface.
package scale
