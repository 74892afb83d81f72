// Package release renders charts/tidal with the pinned Helm (tools/go.mod)
// and installs it on a test cluster as helm install would: server-side
// apply with strict field validation, CRDs first. It also hands out the
// release's ServiceAccounts as clients and kubeconfigs from the TokenRequest
// API, so tests run tidal's services with exactly the RBAC the chart grants.
package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/tidalscale/tidal/test/cluster"
)

// Components are the chart's three services, in stream order.
var Components = []string{"collector", "decider", "actuator"}

// FieldManager is the server-side-apply manager of everything Install
// applies.
const FieldManager = "tidal-chart-test"

// RepoRoot is the checkout's root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// CacheDir is where built tools live between runs:
// ${XDG_CACHE_HOME:-$HOME/.cache}/tidal/chart-test. Builds overwrite their
// file atomically, so test binaries running side by side never see half a
// binary and nothing piles up in the temporary directory.
func CacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	dir := filepath.Join(base, "tidal", "chart-test")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	return dir, nil
}

// GoBuild builds pkg into CacheDir()/name with go build, run in dir with
// env added; the Go build cache makes a rebuild of unchanged code cheap.
func GoBuild(ctx context.Context, dir, name, pkg string, env []string, args ...string) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, name)
	tmp, err := os.CreateTemp(cache, name+".tmp-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	_ = tmp.Close()
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after a successful rename
	cmdArgs := append(append([]string{"build"}, args...), "-o", tmp.Name(), pkg)
	cmd := exec.CommandContext(ctx, "go", cmdArgs...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(cmdArgs, " "), err, b)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return out, nil
}

// tool builds one of tools/go.mod's tools once per process.
func tool(name, pkg string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		return GoBuild(context.Background(), filepath.Join(RepoRoot(), "tools"), name, pkg, nil)
	})
}

var (
	// HelmBinary is the pinned Helm's path, built on first use.
	HelmBinary = tool("helm", "helm.sh/helm/v3/cmd/helm")
	// GrpcurlBinary is the pinned grpcurl's path, built on first use.
	GrpcurlBinary = tool("grpcurl", "github.com/fullstorydev/grpcurl/cmd/grpcurl")
)

// Helm runs the pinned Helm in the repository root with a private home (so
// the user's repositories, plugins and kubeconfig play no part) and the
// given kubeconfig ("" for none). It returns stdout, or an error carrying
// stdout and stderr.
func Helm(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	bin, err := HelmBinary()
	if err != nil {
		return "", err
	}
	home, err := os.MkdirTemp("", "tidal-helm-home-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(home) }()
	if kubeconfig == "" {
		kubeconfig = filepath.Join(home, "no-kubeconfig")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+kubeconfig,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// Options name a rendering of the chart.
type Options struct {
	Name, Namespace string
	// ValuesFiles are paths relative to the repository root.
	ValuesFiles []string
	// Set are --set arguments.
	Set []string
	// IncludeCRDs adds the chart's crds/ to a rendering.
	IncludeCRDs bool
}

// Args are the arguments of helm cmd (template or lint) for o. Helm built as
// a Go tool does not know its client-go's version, so the Kubernetes version
// is the test cluster's, given explicitly.
func (o Options) Args(cmd string) []string {
	args := []string{cmd, o.Name, "charts/tidal"}
	if cmd == "lint" {
		args = []string{"lint", "--strict", "charts/tidal"}
	}
	args = append(args, "--namespace", o.Namespace, "--kube-version", cluster.KubernetesVersion)
	for _, f := range o.ValuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range o.Set {
		args = append(args, "--set", s)
	}
	if o.IncludeCRDs && cmd == "template" {
		args = append(args, "--include-crds")
	}
	return args
}

// Fullname is what the chart's resource names start with, as its
// tidal.fullname helper computes it for a release without overrides.
func (o Options) Fullname() string {
	if strings.Contains(o.Name, "tidal") {
		return o.Name
	}
	return o.Name + "-tidal"
}

// Render runs helm template and decodes every object it prints.
func Render(ctx context.Context, o Options) ([]*unstructured.Unstructured, error) {
	out, err := Helm(ctx, "", o.Args("template")...)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(out)
	if err != nil {
		return nil, fmt.Errorf("helm template output: %w", err)
	}
	return objs, nil
}

// Decode decodes a multi-document YAML stream, skipping empty documents and
// refusing objects without a kind or a name.
func Decode(s string) ([]*unstructured.Unstructured, error) {
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

// NotServedError is returned for an object whose kind the cluster does not
// serve (a ServiceMonitor without the Prometheus Operator).
type NotServedError struct{ Kind string }

func (e *NotServedError) Error() string { return e.Kind + " is not served by this cluster" }

// Applier server-side applies objects with strict field validation, so an
// unknown or misplaced field is an error, as for
// `kubectl apply --server-side`.
type Applier struct {
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
}

// NewApplier returns an Applier writing with cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

func (a *Applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// The kind may have been installed since discovery was cached.
		a.mapper.Reset()
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, &NotServedError{Kind: gvk.String()}
	}
	if err != nil {
		return nil, err
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace()), nil
	}
	return a.dyn.Resource(mapping.Resource), nil
}

// Apply applies o; dryRun runs validation and admission in full and
// changes nothing.
func (a *Applier) Apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	res, err := a.resource(o)
	if err != nil {
		return err
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force, FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := res.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// Delete deletes o; a missing object is no error.
func (a *Applier) Delete(ctx context.Context, o *unstructured.Unstructured) error {
	res, err := a.resource(o)
	if err != nil {
		return err
	}
	if err := res.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// Install renders o (with its CRDs) and applies it to the cluster as helm
// install does: CRDs first, then everything else. Objects of kinds the
// cluster does not serve are left out and their kinds returned. applied
// lists the cluster-scoped objects created (not CRDs), for the caller to
// delete; namespaced ones go with their namespace.
func Install(ctx context.Context, cfg *rest.Config, o Options, dryRun bool) (objs, clusterScoped []*unstructured.Unstructured, notServed map[string]bool, err error) {
	o.IncludeCRDs = true
	objs, err = Render(ctx, o)
	if err != nil {
		return nil, nil, nil, err
	}
	a, err := NewApplier(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	var crds, rest []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, obj)
		} else {
			rest = append(rest, obj)
		}
	}
	notServed = map[string]bool{}
	for _, obj := range append(crds, rest...) {
		err := a.Apply(ctx, obj, dryRun)
		var ns *NotServedError
		switch {
		case err == nil:
		case errors.As(err, &ns):
			notServed[obj.GetKind()] = true
			continue
		default:
			return objs, clusterScoped, notServed, err
		}
		if obj.GetNamespace() == "" && obj.GetKind() != "CustomResourceDefinition" && !dryRun {
			clusterScoped = append(clusterScoped, obj)
		}
	}
	return objs, clusterScoped, notServed, nil
}
