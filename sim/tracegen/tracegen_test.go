package tracegen

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidalscale/tidal/sim/trace"
)

func TestGenerateMix(t *testing.T) {
	fns, err := Generate(Config{Functions: 200, Days: 2, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(fns, 2)
	if want := [5]int{32, 28, 30, 40, 70}; s.Classes != want {
		t.Errorf("classes %v, want %v (the shares of 200)", s.Classes, want)
	}
	for _, f := range fns {
		for i := 1; i < len(f.Starts); i++ {
			if f.Starts[i] < f.Starts[i-1] || f.Starts[i] >= 48*time.Hour {
				t.Fatalf("%s function: start %v after %v, or beyond the span", f.Class, f.Starts[i], f.Starts[i-1])
			}
		}
		if f.Class == Timer && len(f.Starts) > 2 {
			// A timer fires within a second of its time: its gaps agree within two.
			gap := f.Starts[1] - f.Starts[0]
			for i := 2; i < len(f.Starts); i++ {
				if d := f.Starts[i] - f.Starts[i-1] - gap; d > 2*time.Second || d < -2*time.Second {
					t.Fatalf("timer gap %v, first %v", f.Starts[i]-f.Starts[i-1], gap)
				}
			}
		}
	}
	again, _ := Generate(Config{Functions: 200, Days: 2, Seed: 7})
	var a, b bytes.Buffer
	if err := Write2019(&a, fns, 1); err != nil {
		t.Fatal(err)
	}
	if err := Write2019(&b, again, 1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same seed wrote different traces")
	}
	if _, err := Generate(Config{Functions: 0, Days: 1}); err == nil {
		t.Error("0 functions accepted")
	}
	if _, err := Generate(Config{Functions: 1, Days: MaxDays + 1}); err == nil {
		t.Error("too many days accepted")
	}
}

func TestWrittenTracesReadBack(t *testing.T) {
	fns, err := Generate(Config{Functions: 40, Days: 2, Seed: 3, FunctionsPerApp: 3})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for d := range 2 {
		p := filepath.Join(dir, fmt.Sprintf("d%02d.csv", d+1))
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := Write2019(f, fns, d); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		paths = append(paths, p)
	}
	var b bytes.Buffer
	if err := Write2021(&b, fns); err != nil {
		t.Fatal(err)
	}
	want := int64(Summarize(fns, 2).Invocations)
	total := func(src trace.Source) (int64, int) {
		var n int64
		targets := 0
		for {
			tg, err := src.Next()
			if errors.Is(err, io.EOF) {
				return n, targets
			}
			if err != nil {
				t.Fatal(err)
			}
			n += tg.Total()
			targets++
		}
	}
	src, closeFn, err := trace.OpenAzure(paths, trace.ByFunction)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = closeFn() }()
	if n, k := total(src); n != want || k != 40 {
		t.Errorf("2019 format: %d invocations in %d functions, want %d in 40", n, k, want)
	}
	src21, err := trace.ReadAzure2021(&b, "2021", trace.ByApp)
	if err != nil {
		t.Fatal(err)
	}
	if n, k := total(src21); n != want || k != Summarize(fns, 2).Apps {
		t.Errorf("2021 format by application: %d invocations in %d applications, want %d in %d", n, k, want, Summarize(fns, 2).Apps)
	}
}

func TestParseClass(t *testing.T) {
	for c := Timer; c <= Rare; c++ {
		if got, err := ParseClass(c.String()); err != nil || got != c {
			t.Errorf("ParseClass(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := ParseClass("cron" + strings.Repeat("x", 100)); err == nil || !strings.Contains(err.Error(), "bytes)") {
		t.Errorf("an unknown class: %v, want an error quoting a bounded prefix", err)
	}
}
