package chart_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/tidalscale/tidal/test/cluster"
)

// repoRoot is the checkout's root, found from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// chartDir is the chart under test.
func chartDir() string { return filepath.Join(repoRoot(), "charts", "tidal") }

// kubeVersion is what helm renders for: the test cluster's version. Helm
// built as a Go tool does not know its client-go's version, so it must be
// told.
var kubeVersion = cluster.KubernetesVersion

// binDir holds the binaries a test binary builds once: helm from the pinned
// tools module, and the three services built as the Dockerfile builds them.
var binDir = sync.OnceValues(func() (string, error) {
	return os.MkdirTemp("", "tidal-chart-test-")
})

// helmPath builds the pinned Helm (tools/go.mod) once per test binary.
var helmPath = sync.OnceValues(func() (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "helm")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "helm.sh/helm/v3/cmd/helm")
	cmd.Dir = filepath.Join(repoRoot(), "tools")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build helm from tools/go.mod: %w\n%s", err, b)
	}
	return out, nil
})

// helm runs the pinned Helm with a private home, returning stdout and, on
// failure, an error that carries stderr.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	bin, err := helmPath()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = repoRoot()
	// A private home so the user's repositories, plugins and kubeconfig play
	// no part.
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// release names a rendering of the chart.
type release struct {
	name, namespace string
	// valuesFiles are paths relative to the repository root.
	valuesFiles []string
	// set are --set arguments.
	set []string
	// includeCRDs adds the chart's crds/ to the output.
	includeCRDs bool
}

func (r release) args(cmd string) []string {
	args := []string{cmd, r.name, "charts/tidal", "--namespace", r.namespace, "--kube-version", kubeVersion}
	if cmd == "lint" {
		args = []string{"lint", "--strict", "charts/tidal", "--namespace", r.namespace, "--kube-version", kubeVersion}
	}
	for _, f := range r.valuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range r.set {
		args = append(args, "--set", s)
	}
	if r.includeCRDs {
		args = append(args, "--include-crds")
	}
	return args
}

// render runs helm template and decodes every object it prints.
func render(t testing.TB, r release) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, r.args("template")...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects(out)
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	return objs
}

// decodeObjects decodes a multi-document YAML stream, skipping empty
// documents and refusing objects without a kind or a name.
func decodeObjects(s string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(s), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetKind() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("object without kind or name: %v", m)
		}
		objs = append(objs, o)
	}
}

// manifest indexes rendered objects by kind and name.
type manifest []*unstructured.Unstructured

func (m manifest) get(t testing.TB, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range m {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("rendered manifests lack %s %s; have %v", kind, name, m.names())
	return nil
}

func (m manifest) find(kind, name string) *unstructured.Unstructured {
	for _, o := range m {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (m manifest) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (m manifest) names() []string {
	var out []string
	for _, o := range m {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}
