// Package engine is the decider's state: every target's strategy (the KPA or
// lag sets), the samples waiting for their tick, and the latest decision per
// target with its sequence. It takes time as an argument and does no I/O;
// the decider service drives it from one tick loop and sends what it
// returns to the actuator.
//
// Ticks fall on a grid aligned to Unix time (every 2 s for KPA), and a tick
// at time g sees exactly the samples stamped at or before g. That makes a
// decider that rebuilt a target from replayed history reach the same
// decisions as one that saw the samples live.
package engine
