package kpaconfig

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// maxErrBytes bounds every refusal: it reaches a PodAutoscaler's status,
// Events and logs, and must not carry a tenant's whole annotation.
const maxErrBytes = 1024

// checkErr asserts that a refusal is bounded, valid UTF-8 and free of raw
// control characters (a quoted value shows them escaped).
func checkErr(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if len(msg) >= maxErrBytes || !utf8.ValidString(msg) {
		t.Fatalf("error is %d bytes (valid UTF-8: %v), want under %d: %.200q", len(msg), utf8.ValidString(msg), maxErrBytes, msg)
	}
	if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Fatalf("error carries a raw control character: %q", msg)
	}
}

// FuzzParseDeploymentConfig: progress-deadline is accepted only as whole
// seconds above zero, an accepted value formats back (Duration.String) to
// the same config, and a refusal is bounded and names the key.
func FuzzParseDeploymentConfig(f *testing.F) {
	for _, s := range []string{
		"600s", "10m", "1s", "0s", "-1s", "1.5s", "999ms", "9223372036s", "2562047h47m16s", "NaN", "+Inf", "1e300s",
		"", " 30s ", "30", "30s\x00", "\x1b[2J", strings.Repeat("9", 5000) + "s", strings.Repeat("\xff", 300),
	} {
		f.Add(s, true)
	}
	f.Add("", false)
	f.Fuzz(func(t *testing.T, v string, set bool) {
		data := map[string]string{"unrelated-key": "x"}
		if set {
			data[KeyProgressDeadline] = v
		}
		c, err := ParseDeploymentConfig(data)
		if err != nil {
			checkErr(t, err)
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != KeyProgressDeadline {
				t.Fatalf("error %v does not name %s", err, KeyProgressDeadline)
			}
			return
		}
		if !set && c != DefaultDeployment() {
			t.Fatalf("no key: %+v, want the default", c)
		}
		if d := c.ProgressDeadline; d <= 0 || d%time.Second != 0 {
			t.Fatalf("progress-deadline %q accepted as %s, want whole seconds > 0", v, d)
		}
		again, err := ParseDeploymentConfig(map[string]string{KeyProgressDeadline: c.ProgressDeadline.String()})
		if err != nil || again != c {
			t.Fatalf("round trip of %q through %q = %+v, %v; want %+v", v, c.ProgressDeadline.String(), again, err, c)
		}
	})
}
