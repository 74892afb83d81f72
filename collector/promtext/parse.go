package promtext

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ContentType is the media type of the text format; a scraper sends it as
// Accept and checks the response's type with IsContentType.
const ContentType = "text/plain; version=0.0.4"

// ErrNotFound means the body holds no sample of the metric.
var ErrNotFound = errors.New("metric not found")

// IsContentType reports whether a response Content-Type is the text format
// (text/plain with any parameters) or OpenMetrics text, whose sample lines
// this package reads the same way.
func IsContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	return strings.EqualFold(mt, "text/plain") || strings.EqualFold(mt, "application/openmetrics-text")
}

// Sum returns the sum of the values of every sample of metric name in body
// (one per label set; a metric without labels has one), and how many samples
// there were. Comment lines and other metrics are skipped; a malformed sample
// line of the metric is an error that names the line. NaN and infinities are
// returned as they are: whether they are acceptable is the caller's call.
func Sum(body []byte, name string) (sum float64, n int, err error) {
	if !validName(name) {
		return 0, 0, fmt.Errorf("metric name %q: want [a-zA-Z_:][a-zA-Z0-9_:]*", clip([]byte(name)))
	}
	line := 0
	for len(body) > 0 {
		line++
		var l []byte
		l, body, _ = bytes.Cut(body, []byte{'\n'})
		l = bytes.TrimSuffix(trimLeft(l), []byte{'\r'})
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		if len(l) < len(name) || string(l[:len(name)]) != name {
			continue
		}
		rest := l[len(name):]
		if len(rest) > 0 && isNameByte(rest[0]) {
			continue // a longer name with this prefix
		}
		v, err := parseSample(rest)
		if err != nil {
			return 0, 0, fmt.Errorf("line %d: %s: %w", line, clip([]byte(name)), err)
		}
		sum += v
		n++
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("%s: %w", clip([]byte(name)), ErrNotFound)
	}
	return sum, n, nil
}

// parseSample reads `[{labels}] value [timestamp]` after the metric name.
func parseSample(b []byte) (float64, error) {
	b = trimLeft(b)
	if len(b) > 0 && b[0] == '{' {
		var err error
		if b, err = skipLabels(b[1:]); err != nil {
			return 0, err
		}
		b = trimLeft(b)
	}
	value, b := token(b)
	if len(value) == 0 {
		return 0, errors.New("missing value")
	}
	v, err := parseFloat(value)
	if err != nil {
		return 0, err
	}
	if ts, rest := token(trimLeft(b)); len(ts) > 0 {
		if _, err := strconv.ParseInt(string(ts), 10, 64); err != nil {
			return 0, fmt.Errorf("timestamp %q: want integer milliseconds", clip(ts))
		}
		if rest = trimLeft(rest); len(rest) > 0 {
			return 0, fmt.Errorf("unexpected %q after the timestamp", clip(rest))
		}
	}
	return v, nil
}

// token splits b at its first space or tab.
func token(b []byte) (tok, rest []byte) {
	if i := bytes.IndexAny(b, " \t"); i >= 0 {
		return b[:i], b[i:]
	}
	return b, nil
}

// skipLabels consumes `name="value",...}` and returns what follows.
func skipLabels(b []byte) ([]byte, error) {
	for {
		b = trimLeft(b)
		if len(b) == 0 {
			return nil, errors.New("unterminated label set")
		}
		if b[0] == '}' {
			return b[1:], nil
		}
		i := 0
		for i < len(b) && isNameByte(b[i]) && b[i] != ':' {
			i++
		}
		if i == 0 || (b[0] >= '0' && b[0] <= '9') {
			return nil, fmt.Errorf("label name at %q", clip(b))
		}
		b = trimLeft(b[i:])
		if len(b) == 0 || b[0] != '=' {
			return nil, errors.New("label without '='")
		}
		b = trimLeft(b[1:])
		if len(b) == 0 || b[0] != '"' {
			return nil, errors.New("label value not quoted")
		}
		b = b[1:]
		closed := false
		for i = 0; i < len(b); i++ {
			if b[i] == '\\' {
				if i+1 >= len(b) {
					break
				}
				switch b[i+1] {
				case '\\', '"', 'n':
				default:
					return nil, fmt.Errorf("invalid escape %q in label value", b[i:i+2])
				}
				i++
				continue
			}
			if b[i] == '"' {
				closed = true
				break
			}
		}
		if !closed {
			return nil, errors.New("unterminated label value")
		}
		b = trimLeft(b[i+1:])
		if len(b) > 0 && b[0] == ',' {
			b = b[1:]
			continue
		}
		if len(b) == 0 || b[0] != '}' {
			return nil, errors.New("want ',' or '}' after a label")
		}
	}
}

func parseFloat(b []byte) (float64, error) {
	switch string(b) {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	// strconv.ParseFloat does not retain b; the conversion does not allocate.
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return 0, fmt.Errorf("value %q: want a number", clip(b))
	}
	return v, nil
}

// clip is the part of a bad token an error quotes: a pod's body or a
// tenant's metric name may be long, an error must stay short.
func clip(b []byte) []byte { return b[:min(len(b), 32)] }

func trimLeft(b []byte) []byte { return bytes.TrimLeft(b, " \t") }

func isNameByte(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func validName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}
