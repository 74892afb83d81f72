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
	"github.com/tidalscale/tidal/sim/podmodel"
)

// ReadRates reads a CSV of per-second rates: requests per second for a KPA
// target, records produced per second for a lag target. Each record is one
// column (the rate of the next second) or two (second, rate) with seconds
// counting from 0 by one; a first line that is not a number is a header;
// blank lines and lines starting with # are skipped. Rates may be fractional:
// they become whole counts per second with the fraction carried into the
// next second (podmodel.CountsFromRates), so the total is kept. A bad record
// is an error naming its line and field.
func ReadRates(r io.Reader, name string) (Trace, error) {
	ll := newLineLimit(r)
	cr := csv.NewReader(ll)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	var rates []float64
	for first := true; ; first = false {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Trace{}, fmt.Errorf("rates %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) > 2 {
			return Trace{}, fmt.Errorf("rates %s: line %d: %d fields, want 1 (rate) or 2 (second,rate)", name, line, len(rec))
		}
		field := strings.TrimSpace(rec[len(rec)-1])
		rate, err := strconv.ParseFloat(field, 64)
		if err != nil {
			if first && len(rates) == 0 {
				continue // a header
			}
			return Trace{}, fmt.Errorf("rates %s: line %d: field rate %s is not a number", name, line, keyval.Quote(field))
		}
		if rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0) || rate > MaxCount {
			return Trace{}, fmt.Errorf("rates %s: line %d: field rate %s: want a finite rate in [0, %d]", name, line, keyval.Quote(field), MaxCount)
		}
		if len(rec) == 2 {
			sf := strings.TrimSpace(rec[0])
			sec, err := strconv.Atoi(sf)
			if err != nil || sec != len(rates) {
				return Trace{}, fmt.Errorf("rates %s: line %d: field second %s, want %d", name, line, keyval.Quote(sf), len(rates))
			}
		}
		if len(rates) == MaxSeconds {
			return Trace{}, fmt.Errorf("rates %s: line %d: more than %d seconds (31 days)", name, line, MaxSeconds)
		}
		rates = append(rates, rate)
	}
	if len(rates) == 0 {
		return Trace{}, fmt.Errorf("rates %s: no rates", name)
	}
	return Trace{Name: name, Width: time.Second, Counts: podmodel.CountsFromRates(rates, time.Second)}, nil
}
