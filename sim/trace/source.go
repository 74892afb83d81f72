package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tidalscale/tidal/keyval"
)

// Target is one trace among many a Source yields: a function's
// invocations, or an application's (all its functions' together).
type Target struct {
	// Owner, App and Function are the trace's hashes; Function is empty for
	// an application, Owner for the 2021 format, which has none.
	Owner, App, Function string
	// Trigger is the function's trigger, empty when unknown or mixed.
	Trigger string
	// File and Line are where it first appears.
	File string
	Line int
	Trace
}

// Source yields traces one at a time: Next returns io.EOF after the last.
// A Target's Trace is the caller's to keep.
type Source interface {
	Next() (*Target, error)
}

// MaxDays bounds the day files of one Azure 2019 replay.
const MaxDays = 31

// MaxFunctions bounds the functions (or applications) an indexed replay
// holds: the public 2019 trace has about 72,000 over its 14 days.
const MaxFunctions = 1 << 20

// Group says what one replayed trace is.
type Group uint8

const (
	// ByFunction replays each function on its own, as the files list them.
	ByFunction Group = iota
	// ByApp replays each application: its functions' invocations summed,
	// one target, as the paper's policy keeps one histogram per
	// application.
	ByApp
)

// OpenAzure reads Azure Functions 2019 invocation files (one day each, in
// order) as one trace per function, or per application with ByApp: a
// function's days follow each other, so a trace of several days is
// replayed continuously, with zeros for days a function is absent. One
// file by function is streamed in constant memory; otherwise each file is
// read once to index its rows (about 200 bytes a function), then each
// target's rows are read back as it is replayed. Close the Source's files
// with the returned closer.
func OpenAzure(paths []string, group Group) (Source, func() error, error) {
	if len(paths) == 0 || len(paths) > MaxDays {
		return nil, nil, fmt.Errorf("azure: %d files, want 1 to %d (one a day)", len(paths), MaxDays)
	}
	files := make([]*os.File, 0, len(paths))
	closeAll := func() error {
		var errs []error
		for _, f := range files {
			errs = append(errs, f.Close())
		}
		return errors.Join(errs...)
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			_ = closeAll()
			return nil, nil, fmt.Errorf("azure: %w", err)
		}
		files = append(files, f)
	}
	if len(files) == 1 && group == ByFunction {
		ar, err := NewAzureReader(files[0], paths[0])
		if err != nil {
			_ = closeAll()
			return nil, nil, err
		}
		return &azureStream{ar: ar, file: paths[0]}, closeAll, nil
	}
	ix, err := indexAzure(files, paths, group)
	if err != nil {
		_ = closeAll()
		return nil, nil, err
	}
	return ix, closeAll, nil
}

// azureStream is one file by function, streamed.
type azureStream struct {
	ar   *AzureReader
	file string
}

func (s *azureStream) Next() (*Target, error) {
	f, err := s.ar.Next()
	if err != nil {
		return nil, err
	}
	return &Target{Owner: f.Owner, App: f.App, Function: f.Function, Trigger: f.Trigger, File: s.file, Line: f.Line,
		Trace: Trace{Name: f.Name(), Width: time.Minute, Counts: append([]int64(nil), f.Counts...)}}, nil
}

// azureIndex is several files (or grouping), indexed.
type azureIndex struct {
	files []*os.File
	paths []string
	group Group
	// fns are the functions in order of first appearance; rows[i][d] is
	// function i's row on day d (-1 when absent).
	fns  []azureFn
	rows [][]rowAt
	// apps are the applications in order of first appearance, each with
	// its functions' indexes (ByApp).
	apps []azureApp
	next int
	row  *AzureReader // reused to parse a row read back
}

type azureFn struct {
	owner, app, function, trigger string
	file                          string
	line                          int
}

type rowAt struct {
	off  int64
	line int
}

type azureApp struct {
	owner, app string
	fns        []int
}

func indexAzure(files []*os.File, paths []string, group Group) (*azureIndex, error) {
	ix := &azureIndex{files: files, paths: paths, group: group}
	byKey := map[string]int{}
	appIdx := map[string]int{}
	for d, f := range files {
		ar, err := NewAzureReader(f, paths[d])
		if err != nil {
			return nil, err
		}
		for {
			off := ar.offset()
			fn, err := ar.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			key := fn.Owner + "\x00" + fn.App + "\x00" + fn.Function
			i, ok := byKey[key]
			if !ok {
				if len(ix.fns) == MaxFunctions {
					return nil, fmt.Errorf("azure %s: line %d: more than %d functions", paths[d], fn.Line, MaxFunctions)
				}
				i = len(ix.fns)
				byKey[key] = i
				ix.fns = append(ix.fns, azureFn{owner: fn.Owner, app: fn.App, function: fn.Function, trigger: fn.Trigger, file: paths[d], line: fn.Line})
				days := make([]rowAt, len(files))
				for k := range days {
					days[k].off = -1
				}
				ix.rows = append(ix.rows, days)
				akey := fn.Owner + "\x00" + fn.App
				a, ok := appIdx[akey]
				if !ok {
					a = len(ix.apps)
					appIdx[akey] = a
					ix.apps = append(ix.apps, azureApp{owner: fn.Owner, app: fn.App})
				}
				ix.apps[a].fns = append(ix.apps[a].fns, i)
			}
			if ix.rows[i][d].off >= 0 {
				return nil, fmt.Errorf("azure %s: line %d: function %s also on line %d", paths[d], fn.Line, keyval.Quote(fn.Function), ix.rows[i][d].line)
			}
			ix.rows[i][d] = rowAt{off: off, line: fn.Line}
		}
	}
	if len(ix.fns) == 0 {
		return nil, fmt.Errorf("azure %s: no function", strings.Join(paths, ","))
	}
	ix.row = &AzureReader{fn: Function{Counts: make([]int64, Minutes)}}
	return ix, nil
}

func (ix *azureIndex) Next() (*Target, error) {
	var members []int
	var t *Target
	switch ix.group {
	case ByApp:
		if ix.next >= len(ix.apps) {
			return nil, io.EOF
		}
		a := &ix.apps[ix.next]
		first := &ix.fns[a.fns[0]]
		members = a.fns
		t = &Target{Owner: a.owner, App: a.app, File: first.file, Line: first.line}
		t.Name = short(a.app)
		t.Trigger = first.trigger
		for _, i := range a.fns[1:] {
			if ix.fns[i].trigger != t.Trigger {
				t.Trigger = ""
			}
		}
	default:
		if ix.next >= len(ix.fns) {
			return nil, io.EOF
		}
		f := &ix.fns[ix.next]
		members = []int{ix.next}
		t = &Target{Owner: f.owner, App: f.app, Function: f.function, Trigger: f.trigger, File: f.file, Line: f.line}
		t.Name = short(f.app) + "/" + short(f.function)
	}
	ix.next++
	t.Width = time.Minute
	t.Counts = make([]int64, len(ix.files)*Minutes)
	for _, i := range members {
		for d, r := range ix.rows[i] {
			if r.off < 0 {
				continue
			}
			fn, err := ix.readRow(d, r)
			if err != nil {
				return nil, err
			}
			day := t.Counts[d*Minutes : (d+1)*Minutes]
			for m, c := range fn.Counts {
				if day[m] += c; day[m] > MaxCount {
					return nil, fmt.Errorf("azure %s: application %s: minute %d: more than %d invocations", ix.paths[d], keyval.Quote(t.App), m+1, MaxCount)
				}
			}
		}
	}
	return t, nil
}

// readRow reads back the row of day d at r, which the index pass checked.
func (ix *azureIndex) readRow(d int, r rowAt) (*Function, error) {
	f := ix.files[d]
	if _, err := f.Seek(r.off, io.SeekStart); err != nil {
		return nil, fmt.Errorf("azure %s: line %d: %w", ix.paths[d], r.line, err)
	}
	cr := csv.NewReader(newLineLimit(f))
	cr.FieldsPerRecord = len(azureHead) + Minutes
	cr.ReuseRecord = true
	rec, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("azure %s: line %d: read back: %w", ix.paths[d], r.line, err)
	}
	ix.row.name = ix.paths[d]
	return ix.row.parse(rec, r.line)
}
