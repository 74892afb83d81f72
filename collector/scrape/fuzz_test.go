package scrape

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidalscale/tidal/collector/queuestat"
)

// FuzzDecodeBody feeds arbitrary pod answers through the scraper's body
// handling, both formats: it never panics, every refusal carries a reason,
// and whatever it accepts is finite, non-negative, with proxied parts no
// larger than their wholes — nothing else may reach the windows.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range []queuestat.Stat{
		{},
		{PodName: "hello-1", AverageConcurrentRequests: 3, AverageProxiedConcurrentRequests: 1, RequestCount: 5, ProxiedRequestCount: 2, ProcessUptime: 60, Timestamp: 1700000000},
		{AverageConcurrentRequests: math.NaN()},
		{RequestCount: -1},
		{AverageConcurrentRequests: 1, AverageProxiedConcurrentRequests: 2},
	} {
		f.Add([]byte(queuestat.ContentType), queuestat.Marshal(s), false)
	}
	f.Add([]byte("text/plain; version=0.0.4"), []byte("# TYPE app_inflight gauge\napp_inflight{a=\"b\"} 2\n"), true)
	f.Add([]byte("text/plain"), []byte("app_inflight NaN\n"), true)
	f.Add([]byte("application/json"), []byte("{}"), false)
	f.Add([]byte(queuestat.ContentType), []byte{0x0a, 0xff}, false)
	f.Add([]byte(strings.Repeat("\x1b[2J", 1000)), []byte("x"), false)
	f.Add([]byte("text/plain"), []byte("app_inflight 1 "+strings.Repeat("9", 5000)+"x\n"), true)
	f.Add([]byte("text/plain"), []byte("app_inflight{a=\"\\\x1b\"} 1\n"), true)
	f.Add([]byte(queuestat.ContentType), append([]byte{0x0a, 0xc8, 0x02}, strings.Repeat("\xff", 328)...), false)
	f.Fuzz(func(t *testing.T, ct, body []byte, text bool) {
		format := Format{}
		if text {
			format = Format{Kind: FormatText, Metric: "app_inflight"}
		}
		st, v, err := decodeBody(ct, body, format)
		if err != nil {
			var fe *fetchError
			if !errors.As(err, &fe) || fe.reason == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			// A pod's answer is not ours to echo: the error quotes a prefix.
			if msg := err.Error(); len(msg) >= 1024 || !utf8.ValidString(msg) ||
				strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("error of %d bytes, want a short line of UTF-8 text: %.200q", len(msg), msg)
			}
			return
		}
		for _, x := range []float64{st.Concurrency, st.ProxiedConcurrency, st.Requests, st.ProxiedRequests, v} {
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				t.Fatalf("accepted a bad value: %+v, %v", st, v)
			}
		}
		if st.ProxiedConcurrency > st.Concurrency || st.ProxiedRequests > st.Requests {
			t.Fatalf("accepted proxied over total: %+v", st)
		}
		if !text && len(body) > queuestat.MaxSize {
			t.Fatalf("accepted a %d-byte Stat body", len(body))
		}
	})
}
