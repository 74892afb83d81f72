package podmodel

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Profile is an arrival rate over time.
type Profile interface {
	// Rate returns the arrival rate, in requests (or records) per second,
	// at elapsed time since the start of the run. It is never negative.
	Rate(elapsed time.Duration) float64
}

// Constant is a fixed rate per second.
type Constant float64

// Rate implements Profile.
func (c Constant) Rate(time.Duration) float64 { return float64(c) }

// Step is one level of a Steps profile.
type Step struct {
	// At is when the level starts, since the start of the run.
	At time.Duration
	// Rate is the arrival rate per second from At on.
	Rate float64
}

// Steps holds each level from its At until the next step's; before the first
// step the rate is 0. Steps must be sorted by At.
type Steps []Step

// Rate implements Profile.
func (s Steps) Rate(elapsed time.Duration) float64 {
	rate := 0.0
	for _, st := range s {
		if st.At > elapsed {
			break
		}
		rate = st.Rate
	}
	return rate
}

// Validate reports the first unsorted or negative step.
func (s Steps) Validate() error {
	for i, st := range s {
		if st.Rate < 0 || math.IsNaN(st.Rate) || math.IsInf(st.Rate, 0) {
			return fmt.Errorf("steps[%d].rate = %v: want a finite rate >= 0", i, st.Rate)
		}
		if i > 0 && st.At < s[i-1].At {
			return fmt.Errorf("steps[%d].at = %s: before steps[%d].at = %s", i, st.At, i-1, s[i-1].At)
		}
	}
	return nil
}

// Spikes is a base rate with a burst of Peak for Width at the start of every
// Period, the first burst starting at Offset.
type Spikes struct {
	Base, Peak    float64
	Period, Width time.Duration
	Offset        time.Duration
}

// Rate implements Profile.
func (s Spikes) Rate(elapsed time.Duration) float64 {
	if s.Period <= 0 || elapsed < s.Offset {
		return s.Base
	}
	if (elapsed-s.Offset)%s.Period < s.Width {
		return s.Peak
	}
	return s.Base
}

// Series is a recorded trace: Rates[i] is the rate during second i. After the
// last second the rate is 0, or the trace starts over if Loop is set.
type Series struct {
	Rates []float64
	Loop  bool
}

// Rate implements Profile.
func (s Series) Rate(elapsed time.Duration) float64 {
	if len(s.Rates) == 0 || elapsed < 0 {
		return 0
	}
	i := int(elapsed / time.Second)
	if i >= len(s.Rates) {
		if !s.Loop {
			return 0
		}
		i %= len(s.Rates)
	}
	return s.Rates[i]
}

// ParseCSV reads a per-second arrival trace. Each record is either one
// column (the rate of the next second) or two (second, rate), with seconds
// starting at 0 and increasing by one; a first line whose rate is not a
// number is taken as a header. Blank lines and lines starting with # are
// skipped. A bad value is an error naming its line and the value.
func ParseCSV(r io.Reader) (Series, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	var s Series
	for first := true; ; first = false {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Series{}, fmt.Errorf("rate csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) > 2 {
			return Series{}, fmt.Errorf("rate csv: line %d: %d columns, want 1 (rate) or 2 (second,rate)", line, len(rec))
		}
		rateField := strings.TrimSpace(rec[len(rec)-1])
		rate, err := strconv.ParseFloat(rateField, 64)
		if err != nil {
			if first {
				continue // header
			}
			return Series{}, fmt.Errorf("rate csv: line %d: rate %q is not a number", line, rateField)
		}
		if rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
			return Series{}, fmt.Errorf("rate csv: line %d: rate %q: want a finite rate >= 0", line, rateField)
		}
		if len(rec) == 2 {
			secField := strings.TrimSpace(rec[0])
			sec, err := strconv.Atoi(secField)
			if err != nil || sec != len(s.Rates) {
				return Series{}, fmt.Errorf("rate csv: line %d: second %q, want %d", line, secField, len(s.Rates))
			}
		}
		s.Rates = append(s.Rates, rate)
	}
	if len(s.Rates) == 0 {
		return Series{}, errors.New("rate csv: no rates")
	}
	return s, nil
}
