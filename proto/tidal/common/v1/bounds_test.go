package commonv1

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestErrorsQuoteABoundedPrefix: a refused value of megabytes makes an
// error, and so a log line, of a few hundred bytes at most.
func TestErrorsQuoteABoundedPrefix(t *testing.T) {
	huge := strings.Repeat("é", 1<<20) // 2 MiB, two bytes a character
	tests := []struct {
		name string
		err  error
	}{
		{"name", (&TargetRef{Namespace: "ns", Name: huge}).ValidateField("t")},
		{"namespace", ValidateLabel("namespace", huge)},
		{"kind", (&TargetRef{Namespace: "ns", Name: "a", Kind: huge}).ValidateField("t")},
		{"text", ValidateText("reason", huge, 1024)},
		{"not a string", Invalid("v", []string{huge}, "short")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no error")
			}
			msg := tt.err.Error()
			if len(msg) > 300 || !utf8.ValidString(msg) || !strings.Contains(msg, "…") {
				t.Errorf("error of %d bytes (valid UTF-8: %v): %.100q; want at most 300 with the value cut short", len(msg), utf8.ValidString(msg), msg)
			}
		})
	}
	if got := Prefix("short"); got != "short" {
		t.Errorf("Prefix(short) = %q, want it whole", got)
	}
}

func TestText(t *testing.T) {
	tests := []struct {
		v  string
		ok bool
	}{
		{"activator-7d9f", true},
		{"ünïcode → fine", true},
		{"", true},
		{"new\nline", false},
		{"tab\t", false},
		{"esc\x1b[2J", false},
		{"del\x7f", false},
		{"c1\u0085", false},
		{"bad utf-8 \xff", false},
	}
	for _, tt := range tests {
		if got := IsText(tt.v); got != tt.ok {
			t.Errorf("IsText(%q) = %v, want %v", tt.v, got, tt.ok)
		}
	}
}

func TestKindAndAPIVersion(t *testing.T) {
	for _, tt := range []struct {
		v            string
		kind, apiVer bool
	}{
		{"", true, true},
		{"Deployment", true, false},
		{"v1", true, true},
		{"apps/v1", false, true},
		{"test.tidal.dev/v1alpha1", false, true},
		{"Pod", true, false},
		{"Pod ", false, false},
		{"9Lives", false, false},
		{"apps/", false, false},
		{"/v1", false, false},
		{"a/b/c", false, false},
	} {
		if got := IsKind(tt.v); got != tt.kind {
			t.Errorf("IsKind(%q) = %v, want %v", tt.v, got, tt.kind)
		}
		if got := IsAPIVersion(tt.v); got != tt.apiVer {
			t.Errorf("IsAPIVersion(%q) = %v, want %v", tt.v, got, tt.apiVer)
		}
	}
}

func TestPages(t *testing.T) {
	for _, tt := range []struct {
		requested int32
		want      int
	}{{0, DefaultPageSize}, {1, 1}, {MaxPageSize, MaxPageSize}, {MaxPageSize + 1, MaxPageSize}, {1 << 30, MaxPageSize}} {
		if got := PageSize(tt.requested); got != tt.want {
			t.Errorf("PageSize(%d) = %d, want %d", tt.requested, got, tt.want)
		}
	}
	for _, cursor := range []string{"ns/a", "ns/StatefulSet.apps/b", "a\x00b\x00c\x00d"} {
		tok := PageToken(cursor)
		if err := ValidatePage(10, tok); err != nil {
			t.Errorf("ValidatePage(token of %q) = %v", cursor, err)
		}
		if got, err := PageCursor(tok); err != nil || got != cursor {
			t.Errorf("PageCursor(PageToken(%q)) = %q, %v", cursor, got, err)
		}
	}
	for _, tt := range []struct {
		name  string
		size  int32
		token string
		field string
	}{
		{"negative size", -1, "", "page_size"},
		{"not base64", 0, "a token?", "page_token"},
		{"padding", 0, "YQ==", "page_token"},
		{"too long", 0, strings.Repeat("A", MaxPageToken+4), "page_token"},
	} {
		err := ValidatePage(tt.size, tt.token)
		if err == nil || !strings.Contains(err.Error(), "invalid "+tt.field+" ") || len(err.Error()) > 300 {
			t.Errorf("%s: ValidatePage = %v, want a short error naming %s", tt.name, err, tt.field)
		}
	}
}
