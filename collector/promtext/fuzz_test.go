package promtext

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSumErrors feeds any body and any metric name to Sum: a refusal is
// short, valid UTF-8 without raw control characters, and names the metric
// name, the line or ErrNotFound; and Sum is additive over lines: the body
// cut at a line break counts as many samples as its two halves, and
// succeeds exactly when neither half has a bad line and one has a sample.
func FuzzSumErrors(f *testing.F) {
	for _, s := range []struct{ body, name string }{
		{"# TYPE inflight gauge\ninflight 3\ninflight{a=\"1\"} 2 1700000000000\n", "inflight"},
		{"inflight NaN\ninflight +Inf\ninflight -1\ninflight 1e300\n", "inflight"},
		{"inflight 1 " + strings.Repeat("9", 5000) + "x\n", "inflight"},
		{"inflight 1 2 " + strings.Repeat("junk ", 1000) + "\n", "inflight"},
		{"inflight{a=\"\\\x1b\"} 1\n", "inflight"},
		{"inflight{a=\"\\\xff\"} 1\n", "inflight"},
		{"inflight{" + strings.Repeat("a", 5000) + " 1\n", "inflight"},
		{"inflight " + strings.Repeat("\xff", 5000) + "\n", "inflight"},
		{"g 1\n", strings.Repeat("9", 5000)},
		{"g 1\n", "bad\nname\x1b[2J"},
		{strings.Repeat("a", 5000) + " 1 x\n", strings.Repeat("a", 5000)},
		{"\r\n\t\n#\ninflight\t\t7\r\n", "inflight"},
		{"", "inflight"},
	} {
		f.Add([]byte(s.body), s.name)
	}
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		_, n, err := Sum(body, name)
		if err != nil {
			checkErr(t, err, name)
		} else if n < 1 || n > bytes.Count(body, []byte{'\n'})+1 {
			t.Fatalf("Sum found %d samples in %d lines", n, bytes.Count(body, []byte{'\n'})+1)
		}
		cut := bytes.IndexByte(body[len(body)/2:], '\n')
		if cut < 0 {
			return
		}
		cut += len(body)/2 + 1
		_, na, erra := Sum(body[:cut], name)
		_, nb, errb := Sum(body[cut:], name)
		bad := func(err error) bool { return err != nil && !errors.Is(err, ErrNotFound) }
		wantOK := !bad(erra) && !bad(errb) && (erra == nil || errb == nil)
		if (err == nil) != wantOK || err == nil && n != na+nb {
			t.Fatalf("Sum(body) = %d samples, %v; halves at %d: %d, %v and %d, %v", n, err, cut, na, erra, nb, errb)
		}
	})
}

func checkErr(t *testing.T, err error, name string) {
	t.Helper()
	msg := err.Error()
	if len(msg) >= 1024 || !utf8.ValidString(msg) {
		t.Fatalf("error is %d bytes (valid UTF-8: %v), want under 1024: %.200q", len(msg), utf8.ValidString(msg), msg)
	}
	if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 }) {
		t.Fatalf("error carries a raw control character: %q", msg)
	}
	if !strings.HasPrefix(msg, "metric name ") && !strings.HasPrefix(msg, "line ") && !errors.Is(err, ErrNotFound) {
		t.Fatalf("error %q names neither the metric name, a line, nor a missing metric", msg)
	}
}
