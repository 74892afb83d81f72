// Package stream sends a history store's changes to a decider over one
// Ingest stream, reconnecting with jittered backoff. Every new stream starts
// by replaying the whole retained history, marked as replay, so a decider
// that restarted or lost the stream rebuilds exactly what it held.
package stream
