package sim

import (
	"os"
	"strings"
	"testing"
)

func TestParseFileRefuses(t *testing.T) {
	tests := []struct {
		name, file string
		// want are substrings of the error: the field or key, and why.
		want []string
	}{
		{"unknown top-level key", "configuration: []", []string{`unknown field "configuration"`}},
		{"unknown configuration key", "configurations: [{name: a, target: 10}]", []string{`unknown field "target"`}},
		{"unknown pods key", "configurations: [{name: a, pods: {coldstart: 1s}}]", []string{`unknown field "coldstart"`}},
		{"no configurations", "configurations: []", []string{"field configurations", "at least one"}},
		{"no name", "configurations: [{strategy: kpa}]", []string{"configurations[0]", "field name"}},
		{"duplicate name", "configurations: [{name: a}, {name: a}]", []string{"configurations[1]", "field name", "used twice"}},
		{"unknown strategy", "configurations: [{name: a, strategy: hpa}]", []string{"field strategy", `"hpa"`}},
		{"unknown config-autoscaler key", "configurations: [{name: a, autoscaler: {stable-windw: 30s}}]",
			[]string{"field autoscaler", "unknown config-autoscaler key stable-windw"}},
		{"bad config-autoscaler value", "configurations: [{name: a, autoscaler: {scale-to-zero-grace-period: soon}}]",
			[]string{"field autoscaler", "scale-to-zero-grace-period", `"soon"`}},
		{"unknown knative annotation", "configurations: [{name: a, annotations: {autoscaling.knative.dev/targt: '10'}}]",
			[]string{"field annotations", "autoscaling.knative.dev/targt", "unknown"}},
		{"bad knative annotation", "configurations: [{name: a, annotations: {autoscaling.knative.dev/target: ten}}]",
			[]string{"field annotations", "autoscaling.knative.dev/target", `"ten"`}},
		{"lag key on a kpa configuration", "configurations: [{name: a, annotations: {lag.tidal.dev/mode: riff-queue}}]",
			[]string{"field annotations", "lag.tidal.dev/mode", "kpa configuration takes autoscaling.knative.dev/"}},
		{"unknown lag parameter", "configurations: [{name: a, strategy: lag, annotations: {lag.tidal.dev/idletimeout: 5s}}]",
			[]string{"field annotations", "idletimeout"}},
		{"unknown lag mode", "configurations: [{name: a, strategy: lag, annotations: {lag.tidal.dev/mode: riff-fast}}]",
			[]string{"field annotations", "riff-fast"}},
		{"bad duration", "configurations: [{name: a, pods: {coldStart: fast}}]", []string{"duration", `"fast"`}},
		{"negative duration", "configurations: [{name: a, pods: {readyDelay: -1s}}]", []string{"duration", `"-1s"`}},
		{"long value is cut", "configurations: [{name: a, autoscaler: {stable-window: " + strings.Repeat("x", 500) + "}}]",
			[]string{"stable-window", "… (500 bytes)"}},
		{"negative partitions", "configurations: [{name: a, strategy: lag, partitions: -2}]", []string{"field partitions -2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFile([]byte(tt.file))
			if err == nil {
				t.Fatalf("ParseFile accepted %q", tt.file)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(err.Error()) > 400 {
				t.Errorf("error is %d bytes, want a bounded message", len(err.Error()))
			}
		})
	}
}

func TestParseFileAcceptsTestdata(t *testing.T) {
	for _, f := range []string{"testdata/configs.yaml", "testdata/lag.yaml", "testdata/makerun.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfgs, err := ParseFile(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, c := range cfgs {
			if c.Strategy == "" || c.Pods.ServiceTime == 0 {
				t.Errorf("%s: %s: defaults not filled: %+v", f, c.Name, c)
			}
		}
	}
	// JSON is YAML too.
	if _, err := ParseFile([]byte(`{"configurations":[{"name":"j","autoscaler":{"stable-window":"30s"}}]}`)); err != nil {
		t.Fatalf("JSON file: %v", err)
	}
}
