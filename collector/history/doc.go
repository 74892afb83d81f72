// Package history keeps every target's recent samples and spec in one store,
// each change stamped with a store-wide sequence number. A stream to a
// decider reads everything after its cursor; a new stream starts from zero and
// so replays the whole retained history, which is how a restarted decider
// rebuilds its state.
package history
