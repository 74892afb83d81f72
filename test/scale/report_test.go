package scale

import "testing"

// TestFullLoad: a run reaches full load only when it served the pods its
// levels imply, decided every target and had every second scraped.
func TestFullLoad(t *testing.T) {
	full := func() Report {
		var r Report
		r.ImpliedPods, r.Pods = 1000, 990
		r.Unchanged.Sampling = Sampling{Targets: 10, Seconds: 1000}
		return r
	}
	for _, c := range []struct {
		name string
		edit func(*Report)
		want bool
	}{
		{"everything served, decided and scraped", func(*Report) {}, true},
		{"no pods implied", func(r *Report) { r.ImpliedPods, r.Pods = 0, 0 }, false},
		{"too few pods served", func(r *Report) { r.Pods = 900 }, false},
		{"a target undecided", func(r *Report) { r.Undecided = 1 }, false},
		{"1 % of seconds unscraped", func(r *Report) { r.Unchanged.Sampling.Missing = 10 }, true},
		{"the collector fell behind", func(r *Report) { r.Unchanged.Sampling.Missing = 182 }, false},
		{"no steady target polled", func(r *Report) { r.Unchanged.Sampling = Sampling{} }, true},
	} {
		r := full()
		c.edit(&r)
		if got := r.FullLoad(); got != c.want {
			t.Errorf("%s: FullLoad %v, want %v", c.name, got, c.want)
		}
	}
}
