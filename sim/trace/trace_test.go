package trace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

func TestReadRates(t *testing.T) {
	tr, err := ReadRates(strings.NewReader("# a comment\nsecond,rate\n0,1.5\n1,0.5\n\n2,3\n"), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(tr.Counts), "[1 1 3]"; got != want || tr.Width != time.Second {
		t.Fatalf("counts = %s per %s, want %s per second", got, tr.Width, want)
	}
	tr, err = ReadRates(strings.NewReader("2\n4\n"), "t.csv")
	if err != nil || fmt.Sprint(tr.Counts) != "[2 4]" {
		t.Fatalf("one-column rates = %v, %v; want [2 4]", tr.Counts, err)
	}
}

func TestReadRatesRefuses(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"negative", "second,rate\n0,1\n1,-3\n", []string{"line 3", "field rate", `"-3"`}},
		{"not a number", "0,1\n1,lots\n", []string{"line 2", "field rate", `"lots"`}},
		{"gap in seconds", "0,1\n2,1\n", []string{"line 2", "field second", `"2"`, "want 1"}},
		{"three fields", "0,1,2\n", []string{"line 1", "3 fields"}},
		{"NaN", "0,NaN\n", []string{"line 1", "field rate"}},
		{"long value cut", "0,1\n1," + strings.Repeat("9x", 200) + "\n", []string{"line 2", "… (400 bytes)"}},
		{"empty", "# nothing\n", []string{"no rates"}},
		{"line too long", "0," + strings.Repeat("1", MaxLine+10) + "\n", []string{"line 1", "line too long"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadRates(strings.NewReader(tt.in), "t.csv")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(err.Error()) > 300 {
				t.Errorf("error is %d bytes, want a bounded message", len(err.Error()))
			}
		})
	}
}

// azureRow builds one row with count c at minute m (1-based) and 0 elsewhere.
func azureRow(fn string, minute int, count string) string {
	var b strings.Builder
	b.WriteString("o," + "a," + fn + ",http")
	for m := 1; m <= Minutes; m++ {
		if m == minute {
			b.WriteString("," + count)
		} else {
			b.WriteString(",0")
		}
	}
	return b.String() + "\n"
}

func azureHeader() string {
	var b strings.Builder
	b.WriteString("HashOwner,HashApp,HashFunction,Trigger")
	for m := 1; m <= Minutes; m++ {
		fmt.Fprintf(&b, ",%d", m)
	}
	return b.String() + "\n"
}

func TestAzureReader(t *testing.T) {
	in := azureHeader() + azureRow("f1", 3, "7") + azureRow("f2", 1440, "2")
	ar, err := NewAzureReader(strings.NewReader(in), "d01.csv")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ar.Next()
	if err != nil {
		t.Fatal(err)
	}
	if f.Function != "f1" || f.Line != 2 || f.Counts[2] != 7 || len(f.Counts) != Minutes {
		t.Fatalf("first row = %s line %d, minute 3 = %d; want f1 line 2, 7", f.Function, f.Line, f.Counts[2])
	}
	tr := f.Trace()
	if tr.Width != time.Minute || tr.Total() != 7 || tr.Duration() != 24*time.Hour {
		t.Fatalf("trace: width %s, total %d, duration %s", tr.Width, tr.Total(), tr.Duration())
	}
	if f, err = ar.Next(); err != nil || f.Function != "f2" || f.Counts[Minutes-1] != 2 {
		t.Fatalf("second row = %+v, %v", f, err)
	}
	if _, err := ar.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last row: %v, want io.EOF", err)
	}
}

func TestAzureReaderRefuses(t *testing.T) {
	head := azureHeader()
	tests := []struct {
		name, in string
		want     []string
	}{
		{"negative count", head + azureRow("f", 37, "-4"), []string{"line 2", "field minute 37", `"-4"`, "negative"}},
		{"not a number", head + azureRow("f", 5, "1e3"), []string{"line 2", "field minute 5", `"1e3"`}},
		{"too many", head + azureRow("f", 5, "99999999999"), []string{"line 2", "field minute 5", "above"}},
		{"short row", head + "o,a,f,http,1,2\n", []string{"line 2", "wrong number of fields"}},
		{"bad header", strings.Replace(head, "HashApp", "App", 1), []string{"line 1", "field 2", `"App"`, "want HashApp"}},
		{"bad minute header", strings.Replace(head, ",17,", ",x,", 1), []string{"line 1", "field 21", `"x"`, "minute 17"}},
		{"empty function", head + azureRow("", 1, "1"), []string{"line 2", "field HashFunction", "empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ar, err := NewAzureReader(strings.NewReader(tt.in), "d.csv")
			if err == nil {
				_, err = ar.Next()
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestAzureSample(t *testing.T) {
	f, err := os.Open("../testdata/azure-sample.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ar, err := NewAzureReader(f, "azure-sample.csv")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := ar.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("%d functions, want 4", n)
	}
}

func windowJSON(t *testing.T, w *collectorv1.GetWindowResponse) string {
	t.Helper()
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestReadHistory(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ref := &commonv1.TargetRef{Namespace: "demo", Name: "web"}
	ready := int32(2)
	scrape := func(s int, rps float64) *commonv1.MetricSample {
		return &commonv1.MetricSample{Time: timestamppb.New(t0.Add(time.Duration(s)*time.Second + 300*time.Millisecond)),
			Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, RequestCount: rps, ReadyPods: &ready}
	}
	push := func(s int, rps float64) *commonv1.MetricSample {
		return &commonv1.MetricSample{Time: timestamppb.New(t0.Add(time.Duration(s) * time.Second)),
			Source: commonv1.SampleSource_SAMPLE_SOURCE_PUSH, RequestCount: rps, AverageConcurrency: 3}
	}
	// Two overlapping windows, as two grpcurl calls print them.
	a := &collectorv1.GetWindowResponse{Target: ref, Samples: []*commonv1.MetricSample{push(0, 4), scrape(1, 10), scrape(2, 12)}}
	b := &collectorv1.GetWindowResponse{Target: ref, Samples: []*commonv1.MetricSample{scrape(2, 12), scrape(4, 20), push(4, 99)}}
	tr, err := ReadHistory(strings.NewReader(windowJSON(t, a)+windowJSON(t, b)), "h.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(tr.Counts), "[4 10 12 0 20]"; got != want {
		t.Fatalf("counts = %s, want %s (the push at 0 s, scrapes after, the push beside a scrape ignored)", got, want)
	}
	if tr.Name != "demo/web" {
		t.Errorf("name = %q, want demo/web", tr.Name)
	}
}

func TestReadHistoryLag(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ref := &commonv1.TargetRef{Namespace: "demo", Name: "fn"}
	four := int32(4)
	at := func(ms int, ends ...int64) *commonv1.MetricSample {
		s := &commonv1.MetricSample{Time: timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond)),
			Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE, PartitionCount: &four}
		for i, e := range ends {
			s.PartitionLags = append(s.PartitionLags, &commonv1.PartitionLag{Partition: int32(i), EndOffset: e})
		}
		return s
	}
	w := &collectorv1.GetWindowResponse{Target: ref, Samples: []*commonv1.MetricSample{
		at(0, 0, 0, 0, 0), at(1000, 10, 10, 10, 10), at(3000, 30, 30, 30, 30),
	}}
	tr, err := ReadHistory(strings.NewReader(windowJSON(t, w)), "h.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(tr.Counts), "[40 40 40 0]"; got != want || tr.Partitions != 4 {
		t.Fatalf("counts = %s, partitions %d; want %s, 4", got, tr.Partitions, want)
	}
}

func TestReadHistoryRefuses(t *testing.T) {
	ref := func(n string) *commonv1.TargetRef { return &commonv1.TargetRef{Namespace: "demo", Name: n} }
	one := &collectorv1.GetWindowResponse{Target: ref("a"), Samples: []*commonv1.MetricSample{{Time: timestamppb.New(time.Unix(1, 0)), Source: commonv1.SampleSource_SAMPLE_SOURCE_SCRAPE}}}
	other := &collectorv1.GetWindowResponse{Target: ref("b"), Samples: one.Samples}
	noTime := &collectorv1.GetWindowResponse{Target: ref("a"), Samples: []*commonv1.MetricSample{{RequestCount: 1}}}
	tests := []struct {
		name, in string
		want     []string
	}{
		{"two targets", windowJSON(t, one) + windowJSON(t, other), []string{"document 2", "field target", `"demo/b"`}},
		{"not JSON", "{\"target\": ", []string{"document 1"}},
		{"unknown field", `{"target":{"namespace":"a","name":"b"},"samplez":[]}`, []string{"document 1", "samplez"}},
		{"sample without time", windowJSON(t, noTime), []string{"document 1", "samples[0]", "field time"}},
		{"empty", "", []string{"no samples"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadHistory(strings.NewReader(tt.in), "h.json")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestReadHistoryBoundsADocument(t *testing.T) {
	// A document that never ends is refused once it passes the bound, not
	// read whole.
	defer func(l int64) { documentLimit = l }(documentLimit)
	documentLimit = 1 << 16
	r := io.MultiReader(strings.NewReader(`{"target":{"namespace":"a","name":"b"},"samples":[`), endless{})
	_, err := ReadHistory(r, "h.json")
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("endless document: %v, want it refused as too long", err)
	}
}

// endless is unending JSON whitespace.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
