// Package trace reads the load traces tidal-sim replays: the Azure Functions
// 2019 public per-minute invocation counts, a CSV of per-second rates
// (requests, or records produced to a topic), and history exported from a
// running tidal (CollectorService.GetWindow responses as grpcurl prints
// them). Every reader streams or bounds what it holds, and refuses bad input
// naming the line and the field, with at most a 64-byte prefix of the value.
package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"
)

// Trace is one target's load: Counts[i] arrivals (requests, or records
// produced) during [i·Width, (i+1)·Width) from the start of the trace.
type Trace struct {
	// Name identifies the target in reports (a function's hashes, a file).
	Name string
	// Width is the length of one count: a second or a minute.
	Width time.Duration
	// Counts are the arrivals per Width; never negative.
	Counts []int64
	// Partitions is the partition count a history export reported for a lag
	// target; 0 when unknown.
	Partitions int32
}

// Duration is the trace's length.
func (t *Trace) Duration() time.Duration { return time.Duration(len(t.Counts)) * t.Width }

// Total is the number of arrivals in the trace.
func (t *Trace) Total() int64 {
	var n int64
	for _, c := range t.Counts {
		n += c
	}
	return n
}

// MaxSeconds bounds a per-second trace: 31 days.
const MaxSeconds = 31 * 24 * 3600

// MaxCount bounds one count, the arrivals of one second or minute.
const MaxCount = 1 << 22

// MaxLine bounds one line of a CSV trace (an Azure row of 1,440 counts is
// under 16 KiB).
const MaxLine = 64 << 10

// ErrLineTooLong is returned for a line longer than MaxLine.
var ErrLineTooLong = errors.New("line too long")

// lineLimit passes its reader's bytes through and fails on a line longer
// than MaxLine, so a CSV reader never buffers an unbounded record.
type lineLimit struct {
	r    *bufio.Reader
	line int // current line, from 1
	run  int // bytes since the last newline
}

func newLineLimit(r io.Reader) *lineLimit {
	return &lineLimit{r: bufio.NewReaderSize(r, 64<<10), line: 1}
}

func (l *lineLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		if b == '\n' {
			l.line++
			l.run = 0
			continue
		}
		l.run++
		if l.run > MaxLine {
			return i, fmt.Errorf("line %d: %w (more than %d bytes)", l.line, ErrLineTooLong, MaxLine)
		}
	}
	return n, err
}
