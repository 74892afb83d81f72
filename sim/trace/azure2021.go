package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tidalscale/tidal/keyval"
)

// azure2021Head is the Azure Functions 2021 invocation trace's header
// (AzureFunctionsInvocationTraceForTwoWeeksJan2021.txt): one row per
// invocation, its end time and duration in seconds from the trace's start.
var azure2021Head = []string{"app", "func", "end_timestamp", "duration"}

// MaxInvocations bounds the invocations of one 2021-format file, which is
// held in memory (8 bytes each): the public trace has about two million.
const MaxInvocations = 1 << 24

// ReadAzure2021 reads an Azure Functions 2021 per-invocation file: a header
// app,func,end_timestamp,duration, then one row per invocation, in any
// order. An invocation starts at end_timestamp − duration (not before 0).
// Each function (or application, ByApp) becomes one trace of per-second
// counts spanning the whole file (0 to the last end), so every target is
// replayed over the same time. A bad row is refused naming its line and
// field.
func ReadAzure2021(r io.Reader, name string, group Group) (Source, error) {
	cr := csv.NewReader(newLineLimit(r))
	cr.FieldsPerRecord = len(azure2021Head)
	cr.ReuseRecord = true
	cr.TrimLeadingSpace = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure2021 %s: header: %w", name, err)
	}
	for i, want := range azure2021Head {
		if got := strings.TrimSpace(strings.TrimPrefix(head[i], "\ufeff")); got != want {
			return nil, fmt.Errorf("azure2021 %s: line 1: field %d is %s, want %s", name, i+1, keyval.Quote(got), want)
		}
	}
	src := &azure2021{name: name, byKey: map[string]int{}}
	n, last := 0, 0.0
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("azure2021 %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if n++; n > MaxInvocations {
			return nil, fmt.Errorf("azure2021 %s: line %d: more than %d invocations", name, line, MaxInvocations)
		}
		app, fn := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
		if app == "" || fn == "" {
			return nil, fmt.Errorf("azure2021 %s: line %d: field %s is empty", name, line, map[bool]string{true: "app", false: "func"}[app == ""])
		}
		end, err := seconds(rec[2])
		if err != nil {
			return nil, fmt.Errorf("azure2021 %s: line %d: field end_timestamp %s: %w", name, line, keyval.Quote(rec[2]), err)
		}
		dur, err := seconds(rec[3])
		if err != nil {
			return nil, fmt.Errorf("azure2021 %s: line %d: field duration %s: %w", name, line, keyval.Quote(rec[3]), err)
		}
		key := app + "\x00" + fn
		if group == ByApp {
			key = app
			fn = ""
		}
		i, ok := src.byKey[key]
		if !ok {
			if len(src.targets) == MaxFunctions {
				return nil, fmt.Errorf("azure2021 %s: line %d: more than %d functions", name, line, MaxFunctions)
			}
			i = len(src.targets)
			src.byKey[key] = i
			src.targets = append(src.targets, azure2021Target{app: strings.Clone(app), function: strings.Clone(fn), line: line})
		}
		src.targets[i].starts = append(src.targets[i].starts, max(end-dur, 0))
		last = max(last, end)
	}
	if len(src.targets) == 0 {
		return nil, fmt.Errorf("azure2021 %s: no invocation", name)
	}
	src.seconds = int(math.Ceil(last))
	if src.seconds == 0 {
		src.seconds = 1
	}
	return src, nil
}

// seconds parses a time in seconds: finite, at least 0, at most 31 days.
func seconds(v string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, errors.New("not a finite number")
	case f < 0:
		return 0, errors.New("negative")
	case f > MaxSeconds:
		return 0, fmt.Errorf("beyond %d s (31 days)", MaxSeconds)
	}
	return f, nil
}

type azure2021 struct {
	name    string
	byKey   map[string]int
	targets []azure2021Target
	seconds int
	next    int
}

type azure2021Target struct {
	app, function string
	line          int
	starts        []float64
}

func (s *azure2021) Next() (*Target, error) {
	if s.next >= len(s.targets) {
		return nil, io.EOF
	}
	a := &s.targets[s.next]
	s.next++
	t := &Target{App: a.app, Function: a.function, File: s.name, Line: a.line}
	t.Name = short(a.app)
	if a.function != "" {
		t.Name += "/" + short(a.function)
	}
	t.Width = time.Second
	t.Counts = make([]int64, s.seconds)
	for _, at := range a.starts {
		i := min(int(at), s.seconds-1)
		if t.Counts[i]++; t.Counts[i] > MaxCount {
			return nil, fmt.Errorf("azure2021 %s: %s: second %d: more than %d invocations", s.name, keyval.Quote(t.Name), i, MaxCount)
		}
	}
	a.starts = nil // replayed once: let it go
	return t, nil
}
