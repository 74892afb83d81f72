package kpa

import "time"

// delaySlot is the granularity of the scale-down-delay window.
const delaySlot = 2 * time.Second

// delayWindow is the running maximum of the desired scale over the last size
// two-second slots, indexed by ⌊unix seconds / 2⌋ (Knative's
// aggregation/max TimeWindow). It is a monotonic deque in a fixed ring, so
// recording is amortised O(1) and never allocates.
type delayWindow struct {
	// entries[head..head+n) (mod len) hold slot indices increasing and values
	// strictly decreasing: the candidates for the maximum.
	entries []delayEntry
	head, n int
	size    int64
}

type delayEntry struct {
	slot  int64
	value int32
}

func newDelayWindow(delay time.Duration) *delayWindow {
	size := int((delay + delaySlot - 1) / delaySlot)
	return &delayWindow{entries: make([]delayEntry, size), size: int64(size)}
}

func (w *delayWindow) at(i int) *delayEntry { return &w.entries[(w.head+i)%len(w.entries)] }

// record adds v at now and returns the maximum over the slots
// (slot(now) − size, slot(now)].
func (w *delayWindow) record(now time.Time, v int32) int32 {
	slot := floorDiv(now.Unix(), int64(delaySlot/time.Second))
	if w.n > 0 {
		// Time never runs backwards for a target; a late call joins the
		// newest slot.
		slot = max(slot, w.at(w.n-1).slot)
	}
	// Expire slots that left the window.
	for w.n > 0 && w.at(0).slot <= slot-w.size {
		w.head = (w.head + 1) % len(w.entries)
		w.n--
	}
	// Values not above v can never be the maximum again.
	for w.n > 0 && w.at(w.n-1).value <= v {
		w.n--
	}
	if w.n > 0 && w.at(w.n-1).slot == slot {
		// A larger value already holds this slot.
		return w.at(0).value
	}
	*w.at(w.n) = delayEntry{slot: slot, value: v}
	w.n++
	return w.at(0).value
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
