package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tidalscale/tidal/keyval"
)

// Minutes is the number of per-minute counts in an Azure Functions 2019 row.
const Minutes = 1440

// azureHead is the Azure Functions 2019 invocation files' first columns
// (invocations_per_function_md.anon.dNN.csv); the minutes follow as 1..1440.
var azureHead = []string{"HashOwner", "HashApp", "HashFunction", "Trigger"}

// Function is one row of an Azure invocations file: one function's day.
type Function struct {
	Owner, App, Function, Trigger string
	// Line is the row's line in the file.
	Line int
	// Counts are the invocations per minute, 1,440 of them.
	Counts []int64
}

// Name is the function's identity in reports: app/function hashes, cut.
func (f *Function) Name() string { return short(f.App) + "/" + short(f.Function) }

func short(h string) string {
	if len(h) > 8 {
		return h[:8]
	}
	return h
}

// Trace is the function's day as a per-minute trace.
func (f *Function) Trace() Trace {
	return Trace{Name: f.Name(), Width: time.Minute, Counts: f.Counts}
}

// AzureReader streams an Azure Functions 2019 invocations file one function
// at a time, holding one row: a file of any size is read in constant memory.
type AzureReader struct {
	cr   *csv.Reader
	name string
	fn   Function
}

// NewAzureReader checks the header (HashOwner, HashApp, HashFunction,
// Trigger, 1 … 1440) and returns a reader of the rows.
func NewAzureReader(r io.Reader, name string) (*AzureReader, error) {
	cr := csv.NewReader(newLineLimit(r))
	cr.FieldsPerRecord = len(azureHead) + Minutes
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure %s: header: %w", name, err)
	}
	for i, want := range azureHead {
		if got := strings.TrimPrefix(head[i], "\ufeff"); got != want {
			return nil, fmt.Errorf("azure %s: line 1: field %d is %s, want %s", name, i+1, keyval.Quote(got), want)
		}
	}
	for m := 1; m <= Minutes; m++ {
		if got := head[len(azureHead)+m-1]; got != strconv.Itoa(m) {
			return nil, fmt.Errorf("azure %s: line 1: field %d is %s, want minute %d", name, len(azureHead)+m, keyval.Quote(got), m)
		}
	}
	return &AzureReader{cr: cr, name: name, fn: Function{Counts: make([]int64, Minutes)}}, nil
}

// Next returns the next function, or io.EOF after the last. The Function's
// Counts are reused by the next call; copy them to keep them.
func (a *AzureReader) Next() (*Function, error) {
	rec, err := a.cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("azure %s: %w", a.name, err)
	}
	line, _ := a.cr.FieldPos(0)
	return a.parse(rec, line)
}

// offset is the byte offset, in the file, where the next row starts.
func (a *AzureReader) offset() int64 { return a.cr.InputOffset() }

// parse checks one row into a.fn.
func (a *AzureReader) parse(rec []string, line int) (*Function, error) {
	f := &a.fn
	f.Line = line
	f.Owner, f.App, f.Function, f.Trigger = strings.Clone(rec[0]), strings.Clone(rec[1]), strings.Clone(rec[2]), strings.Clone(rec[3])
	for i, col := range azureHead {
		if rec[i] == "" {
			return nil, fmt.Errorf("azure %s: line %d: field %s is empty", a.name, line, col)
		}
	}
	for m := range Minutes {
		v := rec[len(azureHead)+m]
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil:
			return nil, fmt.Errorf("azure %s: line %d: field minute %d: %s is not a whole number", a.name, line, m+1, keyval.Quote(v))
		case n < 0:
			return nil, fmt.Errorf("azure %s: line %d: field minute %d: %s is negative", a.name, line, m+1, keyval.Quote(v))
		case n > MaxCount:
			return nil, fmt.Errorf("azure %s: line %d: field minute %d: %s is above %d", a.name, line, m+1, keyval.Quote(v), MaxCount)
		}
		f.Counts[m] = n
	}
	return f, nil
}
