package sim

import (
	"time"

	"github.com/tidalscale/tidal/sim/podmodel"
	"github.com/tidalscale/tidal/strategy/lag"
)

// commitInterval is how often consumers commit what they processed: riff's
// sidecar's 1 s, as test/workload's consumers do.
const commitInterval = time.Second

// maxRuns bounds a partition's runs of unconsumed records; beyond it the
// oldest two runs merge (their waits then count from the later time).
const maxRuns = 1 << 14

// run is records produced to one partition at one time, not yet consumed.
type run struct {
	at time.Duration
	n  int64
}

type partition struct {
	end, consumed, committed int64
	runs                     []run
}

// lagModel is a topic's partitions and a consumer group of one consumer per
// warm pod: records arrive following the trace (round robin over the
// partitions), partition p is read by consumer p mod c of the c =
// min(consumers, partitions) first consumers by name, each consumer
// processes ratePerPod records a second shared evenly over its partitions,
// and offsets are committed every second.
type lagModel struct {
	parts      []partition
	arrivals   *podmodel.Buckets
	next       time.Duration
	hasNext    bool
	start, now time.Time
	lastCommit time.Time
	rate       float64
	carry      map[string]float64
	seq        int64

	produced, consumed int64
	wait               podmodel.Histogram
	buf                []lag.Partition
}

func newLagModel(partitions int32, arrivals *podmodel.Buckets, start time.Time, ratePerPod float64) *lagModel {
	m := &lagModel{parts: make([]partition, partitions), arrivals: arrivals, start: start, now: start, lastCommit: start,
		rate: ratePerPod, carry: map[string]float64{}}
	m.next, m.hasNext = arrivals.Pop()
	return m
}

// advance produces and consumes up to t with the given warm consumers.
func (m *lagModel) advance(t time.Time, consumers []string) {
	if !t.After(m.now) {
		return
	}
	el := t.Sub(m.start)
	for m.hasNext && m.next <= el {
		p := &m.parts[m.seq%int64(len(m.parts))]
		m.seq++
		p.end++
		m.produced++
		// Records of the same millisecond share a run.
		at := m.next.Truncate(time.Millisecond)
		if k := len(p.runs); k > 0 && p.runs[k-1].at == at {
			p.runs[k-1].n++
		} else {
			if k == maxRuns {
				p.runs[1].n += p.runs[0].n
				p.runs = p.runs[1:]
			}
			p.runs = append(p.runs, run{at: at, n: 1})
		}
		m.next, m.hasNext = m.arrivals.Pop()
	}
	dt := t.Sub(m.now).Seconds()
	c := min(len(consumers), len(m.parts))
	// Carries of consumers that went away are dropped.
	for name := range m.carry {
		keep := false
		for _, n := range consumers[:c] {
			keep = keep || n == name
		}
		if !keep {
			delete(m.carry, name)
		}
	}
	for i := range c {
		name := consumers[i]
		m.carry[name] += m.rate * dt
		budget := int64(m.carry[name])
		m.carry[name] -= float64(budget)
		// Share the budget over the consumer's partitions with lag, evenly,
		// leftovers to the lowest ids, until it is spent or they are empty.
		for budget > 0 {
			var mine []int
			for p := i; p < len(m.parts); p += c {
				if m.parts[p].end > m.parts[p].consumed {
					mine = append(mine, p)
				}
			}
			if len(mine) == 0 {
				m.carry[name] = 0 // an idle consumer banks nothing
				break
			}
			share := max(budget/int64(len(mine)), 1)
			for _, p := range mine {
				if budget == 0 {
					break
				}
				got := m.take(&m.parts[p], min(share, budget), el)
				budget -= got
			}
		}
	}
	if len(consumers) == 0 {
		clear(m.carry)
	}
	for !t.Before(m.lastCommit.Add(commitInterval)) {
		m.lastCommit = m.lastCommit.Add(commitInterval)
		for i := range m.parts {
			m.parts[i].committed = m.parts[i].consumed
		}
	}
	m.now = t
}

// take consumes up to n records of p at el, oldest first, and returns how
// many it took.
func (m *lagModel) take(p *partition, n int64, el time.Duration) int64 {
	var got int64
	for got < n && len(p.runs) > 0 {
		r := &p.runs[0]
		k := min(r.n, n-got)
		m.wait.AddN(el-r.at, uint64(k))
		r.n -= k
		got += k
		if r.n == 0 {
			p.runs = p.runs[1:]
		}
	}
	p.consumed += got
	m.consumed += got
	return got
}

// partitions is what the collector reads: end and committed offsets.
func (m *lagModel) partitions() []lag.Partition {
	m.buf = m.buf[:0]
	for i, p := range m.parts {
		m.buf = append(m.buf, lag.Partition{ID: int32(i), End: p.end, Committed: p.committed, HasCommitted: true})
	}
	return append([]lag.Partition(nil), m.buf...)
}
