package chart_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	rel "github.com/tidalscale/tidal/test/chart/release"
)

func repoRoot() string { return rel.RepoRoot() }

var components = rel.Components

// helm runs the pinned Helm without a cluster.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return rel.Helm(ctx, "", args...)
}

// release names a rendering of the chart.
type release struct {
	name, namespace string
	// valuesFiles are paths relative to the repository root.
	valuesFiles []string
	// set are --set arguments.
	set []string
}

func (r release) opts() rel.Options {
	return rel.Options{Name: r.name, Namespace: r.namespace, ValuesFiles: r.valuesFiles, Set: r.set}
}

func (r release) args(cmd string) []string { return r.opts().Args(cmd) }

// render runs helm template and decodes every object it prints.
func render(t testing.TB, r release) []*unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	objs, err := rel.Render(ctx, r.opts())
	if err != nil {
		t.Fatal(err)
	}
	return objs
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
