// Package dispatch routes every target's samples to one decider replica and
// streams them there over DeciderService.Ingest.
//
// The Hub keeps each target's history (package history) and one outbox per
// decider, both under one lock, so a replay snapshot and the live samples
// after it never overlap or leave a gap. A target is owned by the decider
// that rendezvous hashing (package route) picks from the current endpoints.
// Whenever a stream opens, every target it owns is replayed (replay=true, the
// first replayed batch replacing what the decider held); when the endpoint
// set changes, each moved target is replayed to its new owner and removed
// from the old one. Outboxes are bounded: a decider that falls behind has its
// stream reopened, which replays history in place of the backlog, and
// PushStats callers wait for room (backpressure) rather than grow memory.
package dispatch
