package keepalive

import (
	"encoding/base64"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

var epoch = time.Unix(1_700_000_000, 0).UTC()

// hist builds a histogram from idle times, n of each.
func hist(n int, idles ...time.Duration) Histogram {
	var h Histogram
	for range n {
		for _, d := range idles {
			h.Add(d)
		}
	}
	return h
}

func TestPredict(t *testing.T) {
	m := time.Minute
	spread := func(bins int) []time.Duration {
		var out []time.Duration
		for i := range bins {
			out = append(out, time.Duration(i)*m+30*time.Second)
		}
		return out
	}
	for _, tc := range []struct {
		name           string
		h              Histogram
		fallback       Fallback
		head, tail     time.Duration
		preWarm, until time.Duration
	}{
		{name: "empty", h: Histogram{}, fallback: FewSamples},
		{name: "nine of one bin", h: hist(9, 10*m), fallback: FewSamples, head: 10 * m, tail: 11 * m},
		// A 10-minute timer: every idle time in [9, 10) minutes.
		{name: "timer", h: hist(20, 9*m+58*time.Second), head: 9 * m, tail: 10 * m, preWarm: 8*m + 6*time.Second, until: 11 * m},
		// The 5th percentile of 20 is the 1st value, the 99th the 20th.
		{name: "jittered", h: hist(1, 7*m, 8*m, 8*m, 9*m, 9*m, 9*m, 9*m, 10*m, 10*m, 10*m, 10*m, 10*m, 11*m, 11*m, 11*m, 11*m, 12*m, 12*m, 13*m, 14*m),
			head: 7 * m, tail: 15 * m, preWarm: 6*m + 18*time.Second, until: 16*m + 30*time.Second},
		// Head in the first minute: no unloading, warm until past the tail.
		{name: "frequent", h: hist(10, 20*time.Second, 40*time.Second, 2*m), head: 0, tail: 3 * m, preWarm: 0, until: 3*m + 18*time.Second},
		// 48 of 240 bins evenly: CV exactly 2, still predictable; 49 is too wide.
		{name: "48 bins", h: hist(1, spread(48)...), head: 2 * m, tail: 48 * m, preWarm: 108 * time.Second, until: 52*m + 48*time.Second},
		{name: "49 bins", h: hist(1, spread(49)...), fallback: TooWide, head: 2 * m, tail: 49 * m},
		// Twelve idle times anywhere in three hours: a CV of 4.3 from
		// sampling alone, but spread too far to predict.
		{name: "sparse and spread", h: hist(1, 3*m, 20*m, 35*m, 51*m, 70*m, 88*m, 101*m, 120*m, 133*m, 150*m, 166*m, 179*m),
			fallback: TooWide, head: 3 * m, tail: 180 * m},
		// One in 50 beyond four hours: the 99th percentile is out of range.
		{name: "tail out of range", h: hist(1, append(spread(1)[:0:0], append(repeat(49, 30*m), 5*time.Hour)...)...), fallback: OutOfRange, head: 30 * m},
		// One in 100 beyond: the 99th percentile is the last in range.
		{name: "one percent out", h: hist(1, append(repeat(99, 30*m), 5*time.Hour)...), head: 30 * m, tail: 31 * m, preWarm: 27 * m, until: 34*m + 6*time.Second},
		{name: "all out of range", h: hist(12, 5*time.Hour), fallback: OutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.h.Predict()
			if p.Fallback != tc.fallback || p.Head != tc.head || p.Tail != tc.tail || p.PreWarm != tc.preWarm || p.Until != tc.until {
				t.Errorf("Predict() = %s head %v tail %v window [%v, %v] (CV %.2f); want %s head %v tail %v window [%v, %v]",
					p.Fallback, p.Head, p.Tail, p.PreWarm, p.Until, p.CV, tc.fallback, tc.head, tc.tail, tc.preWarm, tc.until)
			}
		})
	}
}

func repeat(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestCV(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Histogram
		want float64
	}{
		{"empty", Histogram{}, 0},
		{"one bin", hist(5, 3*time.Minute), math.Sqrt(Bins - 1)},
		{"every bin", func() Histogram {
			var h Histogram
			for i := range Bins {
				h.Add(time.Duration(i) * time.Minute)
			}
			return h
		}(), 0},
		{"out of range only", hist(3, 5*time.Hour), 0},
	} {
		if got := tc.h.CV(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: CV() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHistogramHalvesAtItsBound(t *testing.T) {
	var h Histogram
	for range MaxSamples {
		h.Add(2 * time.Minute)
	}
	h.Add(5 * time.Hour)
	h.Add(5 * time.Hour)
	if h.Len() != MaxSamples/2+2 || h.Count(2) != MaxSamples/2 || h.OutOfRange() != 2 {
		t.Fatalf("after %d + 2 idle times: len %d, bin 2 %d, out of range %d; want %d, %d, 2",
			MaxSamples, h.Len(), h.Count(2), h.OutOfRange(), MaxSamples/2+2, MaxSamples/2)
	}
	for range 10 * MaxSamples {
		h.Add(time.Minute)
	}
	if h.Len() > MaxSamples {
		t.Fatalf("len %d after many more, want at most %d", h.Len(), MaxSamples)
	}
}

func TestObserve(t *testing.T) {
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	var s State
	for _, tc := range []struct {
		at      int
		idle    time.Duration
		counted bool
	}{
		{0, 0, false},                 // the first request: no idle time before it
		{1, 0, false},                 // busy
		{4, 0, false},                 // 3 s: still busy
		{8, 4 * time.Second, true},    // 4 s without a request ends an idle time
		{8, 0, false},                 // the same second again
		{5, 0, false},                 // an older sample, counted already
		{608, 10 * time.Minute, true}, // a timer's gap
	} {
		idle, counted := s.Observe(at(tc.at))
		if idle != tc.idle || counted != tc.counted {
			t.Errorf("Observe(+%ds) = %v, %v; want %v, %v", tc.at, idle, counted, tc.idle, tc.counted)
		}
	}
	if got := s.LastActive(); !got.Equal(at(608)) {
		t.Errorf("LastActive() = %v, want %v", got, at(608))
	}
	if h := s.Histogram(); h.Len() != 2 || h.Count(0) != 1 || h.Count(10) != 1 {
		t.Errorf("histogram: len %d, bins 0 and 10: %d %d; want 2, 1 1", h.Len(), h.Count(0), h.Count(10))
	}
}

// timerState is a state that learned n gaps of gap, the last request at
// last.
func timerState(n int, gap time.Duration, last time.Time) State {
	var s State
	for i := n; i >= 0; i-- {
		s.Observe(last.Add(-time.Duration(i) * gap))
	}
	return s
}

func TestDecide(t *testing.T) {
	m := time.Minute
	timer := timerState(20, 10*m-2*time.Second, epoch) // window [8m6s, 11m] after epoch
	frequent := func() State {
		var s State
		at := epoch
		times := []time.Time{at}
		for i := range 30 {
			at = at.Add(-time.Duration(10+i%3*20) * time.Second)
			times = append(times, at)
		}
		for i := len(times) - 1; i >= 0; i-- {
			s.Observe(times[i])
		}
		return s
	}() // idle times of 10 to 50 s: warm from the end, until 1m6s
	few := timerState(5, 10*m, epoch)
	for _, tc := range []struct {
		name      string
		s         State
		after     time.Duration
		knative   int32
		phase     Phase
		desired   int32
		predicted bool
		next      time.Duration // after epoch; -1 for none
	}{
		{name: "nothing seen", s: State{}, after: time.Hour, knative: -1, phase: PhaseUnknown, desired: -1, next: -1},
		{name: "busy", s: timer, after: 3 * time.Second, knative: 4, phase: PhaseBusy, desired: 4, next: IdleAfter},
		{name: "busy, Knative at zero", s: timer, after: 2 * time.Second, knative: 0, phase: PhaseBusy, desired: 0, next: IdleAfter},
		{name: "just idle: zero at once", s: timer, after: IdleAfter, knative: 3, phase: PhaseUnloaded, desired: 0, predicted: true, next: 8*m + 6*time.Second},
		{name: "before the pre-warm", s: timer, after: 8 * m, knative: 0, phase: PhaseUnloaded, desired: 0, predicted: true, next: 8*m + 6*time.Second},
		{name: "pre-warm", s: timer, after: 8*m + 6*time.Second, knative: 0, phase: PhasePreWarm, desired: 1, next: 11 * m},
		{name: "pre-warm, Knative wants more", s: timer, after: 9 * m, knative: 2, phase: PhasePreWarm, desired: 2, next: 11 * m},
		{name: "late", s: timer, after: 11 * m, knative: 1, phase: PhaseLate, desired: 0, predicted: true, next: -1},
		{name: "frequent: kept warm", s: frequent, after: 30 * time.Second, knative: 0, phase: PhaseKeepWarm, desired: 1, next: 66 * time.Second},
		{name: "frequent: late", s: frequent, after: 66 * time.Second, knative: 0, phase: PhaseLate, desired: 0, predicted: true, next: -1},
		{name: "too few: Knative decides", s: few, after: 2 * m, knative: 1, phase: PhaseFallback, desired: 1, next: -1},
		{name: "too few, Knative at zero", s: few, after: 9 * m, knative: 0, phase: PhaseFallback, desired: 0, next: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.s.Decide(epoch.Add(tc.after), tc.knative)
			if d.Phase != tc.phase || d.Desired != tc.desired || d.Predicted != tc.predicted || d.Knative != tc.knative {
				t.Errorf("Decide(+%v, %d) = %s desired %d predicted %v (%s); want %s desired %d predicted %v",
					tc.after, tc.knative, d.Phase, d.Desired, d.Predicted, d.Reason(), tc.phase, tc.desired, tc.predicted)
			}
			want := time.Time{}
			if tc.next >= 0 {
				want = epoch.Add(tc.next)
			}
			if got := d.Next(); !got.Equal(want) {
				t.Errorf("Next() = %v, want %v", got, want)
			}
			if r := d.Reason(); !strings.HasPrefix(r, "keep-alive: ") {
				t.Errorf("Reason() = %q, want it to start with keep-alive:", r)
			}
		})
	}
}

func TestReasonAndExplain(t *testing.T) {
	m := time.Minute
	timer := timerState(20, 10*m-2*time.Second, epoch)
	d := timer.Decide(epoch.Add(3*m), 0)
	if got, want := d.Reason(), "keep-alive: zero, pre-warm at 8m6s (idle 3m; p5 9m, p99 10m)"; got != want {
		t.Errorf("Reason() = %q, want %q", got, want)
	}
	ex := d.Explain()
	for _, want := range []string{"idle times: 20 (0 beyond 4h)", "warm window 8m6s to 11m after the last request", "policy's 0"} {
		if !strings.Contains(ex, want) {
			t.Errorf("Explain() lacks %q:\n%s", want, ex)
		}
	}
	few := timerState(3, 10*m, epoch)
	d = few.Decide(epoch.Add(3*m), 0)
	if got, want := d.Reason(), "keep-alive: fixed grace (3 idle times, want 10)"; got != want {
		t.Errorf("Reason() = %q, want %q", got, want)
	}
	if ex := d.Explain(); !strings.Contains(ex, "the fixed scale-to-zero grace applies") {
		t.Errorf("Explain() of a fallback lacks the grace:\n%s", ex)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	full := func() State {
		var s State
		for i := range Bins {
			for range 4 {
				s.hist.Add(time.Duration(i)*time.Minute + time.Second)
			}
		}
		s.hist.Add(5 * time.Hour)
		s.lastActive = epoch
		return s
	}()
	for _, tc := range []struct {
		name   string
		s      State
		maxLen int
	}{
		{"empty", State{}, 0},
		{"timer", timerState(40, 10*time.Minute, epoch), 32},
		{"full", full, MaxEncoded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.s.Encode()
			if len(text) > tc.maxLen {
				t.Errorf("Encode() is %d characters, want at most %d", len(text), tc.maxLen)
			}
			got, err := Decode(text)
			if err != nil {
				t.Fatalf("Decode(%q): %v", text, err)
			}
			if got != tc.s {
				t.Errorf("Decode(Encode()) = %+v, want %+v", got, tc.s)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"too long", strings.Repeat("A", MaxEncoded+1), "1025 characters"},
		{"not base64", "!!!", "not unpadded base64url"},
		{"padded", "CAE=", "not unpadded base64url"},
		{"not protobuf", "_w", "bad keep-alive state"},
		{"negative time", encoded(-5, 0, nil), "last_active -5"},
		{"far future", encoded(1<<40, 0, nil), "last_active"},
		{"too many bins", encoded(0, 0, make([]uint32, Bins+1)), "241 bins"},
		{"big count", encoded(0, 0, []uint32{0, 2000}), "counts[1] 2000"},
		{"too many in all", encoded(0, 600, []uint32{600}), "1200 idle times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.text)
			if !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode() = %v, want ErrBadState mentioning %q", err, tc.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("")
	seed := timerState(40, 10*time.Minute, epoch)
	f.Add(seed.Encode())
	f.Add(encoded(1, 3, []uint32{1, 2, 3}))
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Decode(text)
		if err != nil {
			return
		}
		if s.hist.Len() > MaxSamples {
			t.Fatalf("decoded %d idle times, want at most %d", s.hist.Len(), MaxSamples)
		}
		again, err := Decode(s.Encode())
		if err != nil || again != s {
			t.Fatalf("re-encoding %q: %v, %+v != %+v", text, err, again, s)
		}
		s.Decide(epoch, 1)
	})
}

// encoded writes a KeepAliveState message as Encode would, unchecked.
func encoded(last int64, oob uint32, counts []uint32) string {
	b, err := proto.Marshal(&deciderv1.KeepAliveState{LastActive: last, OutOfRange: oob, Counts: counts})
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
