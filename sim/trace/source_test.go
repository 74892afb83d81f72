package trace

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// appRow is azureRow for application app.
func appRow(app, fn string, minute int, count string) string {
	return strings.Replace(azureRow(fn, minute, count), "o,a,", "o,"+app+",", 1)
}

func drain(t *testing.T, src Source) []*Target {
	t.Helper()
	var out []*Target
	for {
		tg, err := src.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tg)
	}
}

func TestOpenAzureDays(t *testing.T) {
	// f1 on both days, f2 only on the second, f3 (another app) on the first.
	d1 := writeFile(t, "d01.csv", azureHeader()+appRow("a", "f1", 10, "3")+appRow("b", "f3", 1, "1"))
	d2 := writeFile(t, "d02.csv", azureHeader()+appRow("a", "f2", 5, "2")+appRow("a", "f1", 1440, "4"))
	for _, tc := range []struct {
		name   string
		group  Group
		paths  []string
		want   []string      // names
		counts map[int]int64 // of the first target: minute index → count
		days   int
	}{
		{name: "one file streams", paths: []string{d1}, want: []string{"a/f1", "b/f3"}, counts: map[int]int64{9: 3}, days: 1},
		{name: "two days", paths: []string{d1, d2}, want: []string{"a/f1", "b/f3", "a/f2"}, counts: map[int]int64{9: 3, 2*Minutes - 1: 4}, days: 2},
		{name: "by application", group: ByApp, paths: []string{d1, d2}, want: []string{"a", "b"}, counts: map[int]int64{9: 3, Minutes + 4: 2, 2*Minutes - 1: 4}, days: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, closeFn, err := OpenAzure(tc.paths, tc.group)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = closeFn() }()
			got := drain(t, src)
			var names []string
			for _, g := range got {
				names = append(names, g.Name)
			}
			if strings.Join(names, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("targets %v, want %v", names, tc.want)
			}
			first := got[0]
			if first.Duration() != time.Duration(tc.days)*24*time.Hour {
				t.Errorf("duration %v, want %d days", first.Duration(), tc.days)
			}
			var total int64
			for i, c := range first.Counts {
				total += c
				if want := tc.counts[i]; c != want {
					t.Errorf("minute %d: %d, want %d", i, c, want)
				}
			}
			if first.Line != 2 {
				t.Errorf("line %d, want 2", first.Line)
			}
		})
	}
}

func TestOpenAzureRefuses(t *testing.T) {
	good := writeFile(t, "d01.csv", azureHeader()+appRow("a", "f1", 1, "1"))
	twice := writeFile(t, "d02.csv", azureHeader()+appRow("a", "f1", 1, "1")+appRow("a", "f1", 2, "1"))
	bad := writeFile(t, "d03.csv", azureHeader()+appRow("a", "f1", 7, "-1"))
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"none", nil, "0 files"},
		{"missing", []string{good, filepath.Join(t.TempDir(), "nope.csv")}, "no such file"},
		{"a function twice a day", []string{good, twice}, "line 3: function \"f1\" also on line 2"},
		{"a bad row on day two", []string{good, bad}, "d03.csv: line 2: field minute 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, closeFn, err := OpenAzure(tc.paths, ByFunction)
			if err == nil {
				_ = closeFn()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestReadAzure2021(t *testing.T) {
	in := "app,func,end_timestamp,duration\n" +
		"a,f,10.5,0.5\n" + // starts at 10
		"a,g,3.25,1\n" + // starts at 2.25
		"a,f,2.0,5\n" + // would start before 0: at 0
		"b,h,99.9,0.1\n" // the last end: 100 s
	for _, tc := range []struct {
		name  string
		group Group
		want  map[string]map[int]int64
	}{
		{"by function", ByFunction, map[string]map[int]int64{"a/f": {0: 1, 10: 1}, "a/g": {2: 1}, "b/h": {99: 1}}},
		{"by application", ByApp, map[string]map[int]int64{"a": {0: 1, 2: 1, 10: 1}, "b": {99: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := ReadAzure2021(strings.NewReader(in), "t.txt", tc.group)
			if err != nil {
				t.Fatal(err)
			}
			got := drain(t, src)
			if len(got) != len(tc.want) {
				t.Fatalf("%d targets, want %d", len(got), len(tc.want))
			}
			for _, g := range got {
				want, ok := tc.want[g.Name]
				if !ok {
					t.Fatalf("unexpected target %s", g.Name)
				}
				if g.Width != time.Second || len(g.Counts) != 100 {
					t.Errorf("%s: width %v, %d seconds; want 1s, 100", g.Name, g.Width, len(g.Counts))
				}
				for i, c := range g.Counts {
					if c != want[i] {
						t.Errorf("%s: second %d: %d, want %d", g.Name, i, c, want[i])
					}
				}
			}
		})
	}
}

func TestReadAzure2021Refuses(t *testing.T) {
	head := "app,func,end_timestamp,duration\n"
	for _, tc := range []struct{ name, in, want string }{
		{"bad header", "app,function,end_timestamp,duration\n", `line 1: field 2 is "function", want func`},
		{"empty", head, "no invocation"},
		{"negative duration", head + "a,f,3,-1\n", `line 2: field duration "-1": negative`},
		{"not a number", head + "a,f,soon,1\n", `line 2: field end_timestamp "soon": not a finite number`},
		{"beyond 31 days", head + "a,f,3e6,1\n", "beyond"},
		{"no app", head + ",f,3,1\n", "line 2: field app is empty"},
		{"short row", head + "a,f,3\n", "wrong number of fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadAzure2021(strings.NewReader(tc.in), "t.txt", ByFunction)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
