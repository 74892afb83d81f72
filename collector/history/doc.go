// Package history keeps one target's recent samples: the span a decider
// needs to rebuild its windows (the stable window plus the scale-down delay,
// or a lag strategy's memory), so that a decider that restarted, or that a
// target moved to, replays it and reaches the same state as one that never
// stopped.
package history
