package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// fieldManager is the server-side-apply manager for everything the harness
// writes.
const fieldManager = "tidal-test-cluster"

// InstallCRDs applies every CustomResourceDefinition in the YAML files of
// dirs and waits until the API server serves them.
func (c *Cluster) InstallCRDs(ctx context.Context, dirs ...string) error {
	return c.installCRDs(ctx, dirs, time.Minute)
}

func (c *Cluster) installCRDs(ctx context.Context, dirs []string, timeout time.Duration) error {
	var crds []*unstructured.Unstructured
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return fmt.Errorf("CRDs in %s: %w", dir, err)
		}
		if len(files) == 0 {
			return fmt.Errorf("CRDs in %s: no *.yaml files", dir)
		}
		sort.Strings(files)
		for _, f := range files {
			objs, err := readObjects(f)
			if err != nil {
				return err
			}
			for _, o := range objs {
				if o.GetKind() != "CustomResourceDefinition" {
					return fmt.Errorf("%s: %s %q is not a CustomResourceDefinition", f, o.GetKind(), o.GetName())
				}
			}
			crds = append(crds, objs...)
		}
	}
	if len(crds) == 0 {
		return nil
	}
	dyn, err := dynamic.NewForConfig(c.config)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	res := dyn.Resource(crdResource)
	for _, crd := range crds {
		if _, err := res.Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("apply CRD %s: %w", crd.GetName(), err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, crd := range crds {
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := res.Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", crd.GetName(), err)
		}
	}
	return nil
}

// readObjects decodes every document of a YAML file, skipping empty ones.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if strings.TrimSpace(o.GetName()) == "" {
			return nil, fmt.Errorf("%s: %s without a name", path, o.GetKind())
		}
		objs = append(objs, o)
	}
}
