package queuestat

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// hostileStats are encoded Stats FuzzUnmarshal starts from besides the
// valid ones: pod names of invalid UTF-8, at and far over MaxSize.
var hostileStats = [][]byte{
	protowire.AppendBytes(protowire.AppendTag(nil, fieldPodName, protowire.BytesType), []byte(strings.Repeat("\xff", 300))),
	protowire.AppendBytes(protowire.AppendTag(nil, fieldPodName, protowire.BytesType), []byte(strings.Repeat("\x1b[2J", 2000))),
	protowire.AppendBytes(protowire.AppendTag(nil, fieldPodName, protowire.BytesType), []byte("pod\n\x00\xc0")),
}

// checkErr asserts a decoding error is short, valid UTF-8 without raw
// control characters, and says it is about a Stat.
func checkErr(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if len(msg) >= 1024 || !utf8.ValidString(msg) {
		t.Fatalf("error is %d bytes (valid UTF-8: %v), want under 1024: %.200q", len(msg), utf8.ValidString(msg), msg)
	}
	if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		t.Fatalf("error carries a raw control character: %q", msg)
	}
	if !strings.HasPrefix(msg, "stat: ") {
		t.Fatalf("error %q does not say it is about a Stat", msg)
	}
}
