package kedascaler

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestExamplesParse: every trigger of docs/keda.md's examples (the files
// under examples/keda) is metadata this package accepts, in the mode its
// file is for.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob("../../examples/keda/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	want := map[string]string{"follow-podautoscaler.yaml": "follow", "follow-function.yaml": "follow", "inline-kafka.yaml": "kafka"}
	for _, f := range files {
		mode, ok := want[filepath.Base(f)]
		if !ok {
			t.Errorf("%s: no mode expected for this example; add it here", f)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		triggers := 0
		for _, doc := range bytes.Split(b, []byte("\n---\n")) {
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Namespace string `json:"namespace"`
				} `json:"metadata"`
				Spec struct {
					Triggers []struct {
						Type     string            `json:"type"`
						Metadata map[string]string `json:"metadata"`
					} `json:"triggers"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if obj.Kind != "ScaledObject" {
				continue
			}
			for _, tr := range obj.Spec.Triggers {
				triggers++
				if tr.Type != "external" && tr.Type != "external-push" {
					t.Errorf("%s: trigger type %q", f, tr.Type)
				}
				got, err := Parse(obj.Metadata.Namespace, tr.Metadata)
				switch {
				case err != nil:
					t.Errorf("%s: %v", f, err)
				case mode == "follow" && got.Follow == nil, mode == "kafka" && got.Kafka == nil:
					t.Errorf("%s: parsed as %+v, want %s mode", f, got, mode)
				}
			}
		}
		if triggers == 0 {
			t.Errorf("%s: no ScaledObject trigger", f)
		}
	}
}
