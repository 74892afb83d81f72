package keda

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/kedacore/keda/v2/pkg/scalers"
	"github.com/kedacore/keda/v2/pkg/scalers/authentication"
	"github.com/kedacore/keda/v2/pkg/scalers/scalersconfig"
	"github.com/kedacore/keda/v2/pkg/scaling/resolver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/cluster"
)

// examplesDir holds the KEDA examples docs/keda.md shows, relative to this package;
// the flag is for trying an edited example before it goes in docs/keda.md.
var examplesDir = flag.String("examples", "../../examples/keda", "Directory of the KEDA examples docs/keda.md shows (*.yaml).")

// examples are docs/keda.md's KEDA objects, read strictly: an unknown field is
// an error, so a typo in an example fails here rather than in a user's
// cluster.
type examples struct {
	scaledObjects []*kedav1alpha1.ScaledObject
	// triggerAuths are by namespace/name.
	triggerAuths map[string]*kedav1alpha1.TriggerAuthentication
	// file names the file each ScaledObject came from, by name.
	file map[string]string
}

func loadExamples(t *testing.T) *examples {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(*examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no examples in %s: docs/keda.md's KEDA examples are what these tests run", *examplesDir)
	}
	sort.Strings(paths)
	ex := &examples{triggerAuths: map[string]*kedav1alpha1.TriggerAuthentication{}, file: map[string]string{}}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitYAML(raw)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for i, doc := range docs {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: document %d: %v", p, i+1, err)
			}
			switch meta.Kind {
			case "ScaledObject":
				so := &kedav1alpha1.ScaledObject{}
				if err := yaml.UnmarshalStrict(doc, so); err != nil {
					t.Fatalf("%s: document %d (ScaledObject): %v", p, i+1, err)
				}
				ex.scaledObjects = append(ex.scaledObjects, so)
				ex.file[so.Name] = filepath.Base(p)
			case "TriggerAuthentication":
				ta := &kedav1alpha1.TriggerAuthentication{}
				if err := yaml.UnmarshalStrict(doc, ta); err != nil {
					t.Fatalf("%s: document %d (TriggerAuthentication): %v", p, i+1, err)
				}
				key := ta.Namespace + "/" + ta.Name
				if ex.triggerAuths[key] != nil {
					t.Fatalf("%s: TriggerAuthentication %s is defined twice in the examples", p, key)
				}
				ex.triggerAuths[key] = ta
			}
			// Other kinds (tidal's own objects, a Certificate) are made by
			// each test for its own namespace.
		}
	}
	if len(ex.scaledObjects) == 0 {
		t.Fatalf("no ScaledObject in %s", *examplesDir)
	}
	return ex
}

// splitYAML splits a multi-document YAML file.
func splitYAML(raw []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// find returns the example ScaledObjects with a trigger of one of types
// whose metadata has key, with that trigger's index.
func (ex *examples) find(key string, types ...string) []exampleTrigger {
	var out []exampleTrigger
	for _, so := range ex.scaledObjects {
		for i, tr := range so.Spec.Triggers {
			if _, ok := tr.Metadata[key]; ok && contains(types, tr.Type) {
				out = append(out, exampleTrigger{so: so, index: i, file: ex.file[so.Name]})
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// exampleTrigger is one trigger of an example ScaledObject.
type exampleTrigger struct {
	so    *kedav1alpha1.ScaledObject
	index int
	file  string
}

func (e exampleTrigger) String() string {
	return fmt.Sprintf("%s: ScaledObject %s trigger %d (%s)", e.file, e.so.Name, e.index, e.so.Spec.Triggers[e.index].Type)
}

func (e exampleTrigger) trigger() kedav1alpha1.ScaleTriggers { return e.so.Spec.Triggers[e.index] }

// kedaCRDs installs KEDA's CRDs (from its module, the version go.mod pins)
// in the shared cluster, once per test binary, so the examples are
// validated by KEDA's own schemas and read back by KEDA's resolver.
var kedaCRDs struct {
	once sync.Once
	err  error
}

func installKEDACRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	kedaCRDs.once.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2").Output()
		if err != nil {
			kedaCRDs.err = fmt.Errorf("find KEDA's module: %w", err)
			return
		}
		dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		kedaCRDs.err = c.InstallCRDs(ctx, dir)
	})
	if kedaCRDs.err != nil {
		t.Fatalf("KEDA's CRDs: %v", kedaCRDs.err)
	}
}

// kubeClient is a controller-runtime client of c knowing KEDA's types, as
// KEDA's operator has.
func kubeClient(t *testing.T, c *cluster.Cluster) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kedav1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// deployment says where an example is applied and what it reaches: the
// test's namespace, the collector's address (in place of the example's
// Service name), and the test's certificates for the Secrets its
// TriggerAuthentication reads.
type deployment struct {
	c          *cluster.Cluster
	kube       client.Client
	ns         string
	scalerAddr string
	certs      *certs
}

// apply creates the example's ScaledObject in d.ns with what its
// authenticationRef names and the Secrets that reads, in the API server with
// KEDA's CRDs, and returns the ScalerConfig KEDA's operator would build for
// the trigger: the metadata as written (scalerAddress pointed at the test's
// collector) and the auth params resolved by KEDA's resolver from the
// Secrets. Overrides change metadata keys (an empty value deletes the key).
func (d *deployment) apply(t *testing.T, ex *examples, e exampleTrigger, name string, overrides map[string]string) *scalersconfig.ScalerConfig {
	t.Helper()
	return d.applyWith(t, ex, e, name, overrides, nil)
}

// applyWith is apply with edit changing the ScaledObject before it is
// created (nil: none).
func (d *deployment) applyWith(t *testing.T, ex *examples, e exampleTrigger, name string, overrides map[string]string, edit func(*kedav1alpha1.ScaledObject)) *scalersconfig.ScalerConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	so := d.create(t, ex, e, name, overrides, edit)
	tr := so.Spec.Triggers[e.index]

	cfg := &scalersconfig.ScalerConfig{
		ScalableObjectName:      so.Name,
		ScalableObjectNamespace: so.Namespace,
		ScalableObjectType:      "ScaledObject",
		TriggerName:             tr.Name,
		TriggerMetadata:         tr.Metadata,
		TriggerType:             tr.Type,
		TriggerUseCachedMetrics: tr.UseCachedMetrics,
		ResolvedEnv:             map[string]string{},
		GlobalHTTPTimeout:       3 * time.Second,
		TriggerIndex:            e.index,
		MetricType:              tr.MetricType,
		ScaledObject:            so,
		TriggerUniqueKey:        fmt.Sprintf("ScaledObject-%s-%s-%d", so.Namespace, so.Name, e.index),
	}
	// The operator resolves auth params from the (Cluster)TriggerAuthentication
	// it reads back from the API server; the scale target's pod template only
	// matters for env-based auth, which the examples do not use.
	params, _, err := resolver.ResolveAuthRefAndPodIdentity(ctx, d.kube, logf.Log.WithName("resolver"), tr.AuthenticationRef, nil, so.Namespace, &authentication.AuthClientSet{})
	if err != nil {
		t.Fatalf("%s: resolve auth params: %v", e, err)
	}
	if tr.AuthenticationRef != nil {
		// KEDA's resolver logs a Secret it cannot read and goes on without
		// it; here that would only show later as a failed handshake.
		for _, p := range []string{"caCert", "tlsClientCert", "tlsClientKey"} {
			if params[p] == "" {
				t.Fatalf("%s: KEDA resolved no %s from %s %s", e, p, tr.AuthenticationRef.Kind, tr.AuthenticationRef.Name)
			}
		}
	}
	cfg.AuthParams = params
	return cfg
}

// create creates the example's ScaledObject as name in d.ns, its
// scalerAddress pointed at the test's collector and its metadata changed by
// overrides (an empty value deletes the key), then changed by edit when
// given, with what its authenticationRef names, and returns it.
func (d *deployment) create(t *testing.T, ex *examples, e exampleTrigger, name string, overrides map[string]string, edit func(*kedav1alpha1.ScaledObject)) *kedav1alpha1.ScaledObject {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	so := e.so.DeepCopy()
	so.Name, so.Namespace = name, d.ns
	tr := &so.Spec.Triggers[e.index]
	if tr.Metadata["scalerAddress"] == "" {
		t.Fatalf("%s: no scalerAddress", e)
	}
	tr.Metadata = maps.Clone(tr.Metadata)
	tr.Metadata["scalerAddress"] = d.scalerAddr
	for k, v := range overrides {
		if v == "" {
			delete(tr.Metadata, k)
		} else {
			tr.Metadata[k] = v
		}
	}
	if edit != nil {
		edit(so)
	}
	if ref := tr.AuthenticationRef; ref != nil {
		switch ref.Kind {
		case "", "TriggerAuthentication":
			d.applyAuth(ctx, t, ex, e, ref.Name)
		case "ClusterTriggerAuthentication":
			d.applyClusterAuth(ctx, t, e, ref.Name)
		default:
			t.Fatalf("%s: authenticationRef kind %s", e, ref.Kind)
		}
	}
	if err := d.kube.Create(ctx, so); err != nil {
		t.Fatalf("%s: create ScaledObject (KEDA's CRD schema): %v", e, err)
	}
	d.deleteAtEnd(t, so)
	return so
}

// deleteAtEnd deletes so when t ends and waits until it is gone. KEDA's
// operator, in the tests that run it, puts a finalizer on a ScaledObject:
// it must be deleted while the operator still runs (cleanups run last
// registered first), or its namespace would never go.
func (d *deployment) deleteAtEnd(t *testing.T, so *kedav1alpha1.ScaledObject) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.kube.Delete(ctx, so); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ScaledObject %s: %v", so.Name, err)
			return
		}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			err := d.kube.Get(ctx, client.ObjectKeyFromObject(so), &kedav1alpha1.ScaledObject{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("ScaledObject %s not gone 30 s after its deletion: %v", so.Name, err)
		}
	})
}

// material is what the test's Secrets hold for each auth parameter KEDA's
// external scaler reads: the test's CA and KEDA's client certificate.
func (d *deployment) material(t *testing.T) map[string][]byte {
	cert, key := d.certs.pem(t, "keda")
	return map[string][]byte{"caCert": d.certs.caPEM, "tlsClientCert": cert, "tlsClientKey": key}
}

// secretsFor are the Secrets in ns that refs read, holding the test's
// material under the keys they name.
func (d *deployment) secretsFor(t *testing.T, e exampleTrigger, what, ns string, refs []kedav1alpha1.AuthSecretTargetRef) map[string]*corev1.Secret {
	t.Helper()
	material := d.material(t)
	secrets := map[string]*corev1.Secret{}
	for _, ref := range refs {
		v, ok := material[ref.Parameter]
		if !ok {
			t.Fatalf("%s: %s: parameter %s: the test has material for %s only", e, what, ref.Parameter, strings.Join(sortedKeys(material), ", "))
		}
		s := secrets[ref.Name]
		if s == nil {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ns}, Data: map[string][]byte{}}
			secrets[ref.Name] = s
		}
		s.Data[ref.Key] = v
	}
	return secrets
}

// applyAuth creates the TriggerAuthentication name (once per namespace) and
// the Secrets its secretTargetRef entries read, holding the test's CA and
// KEDA's client certificate under the keys the example names.
func (d *deployment) applyAuth(ctx context.Context, t *testing.T, ex *examples, e exampleTrigger, name string) {
	t.Helper()
	// A ScaledObject reads the TriggerAuthentication of its own namespace.
	src := ex.triggerAuths[e.so.Namespace+"/"+name]
	if src == nil {
		t.Fatalf("%s: authenticationRef %s: no TriggerAuthentication %s/%s in the examples", e, name, e.so.Namespace, name)
	}
	ta := src.DeepCopy()
	ta.Namespace = d.ns
	for _, s := range d.secretsFor(t, e, "TriggerAuthentication "+name, d.ns, ta.Spec.SecretTargetRef) {
		if err := d.kube.Create(ctx, s); err != nil && !alreadyExists(err) {
			t.Fatalf("%s: create Secret %s: %v", e, s.Name, err)
		}
	}
	if err := d.kube.Create(ctx, ta); err != nil && !alreadyExists(err) {
		t.Fatalf("%s: create TriggerAuthentication %s (KEDA's CRD schema): %v", e, name, err)
	}
}

// chartRelease is how the tests render the chart for its
// ClusterTriggerAuthentication: release tidal with tls.keda, KEDA in
// kedaNamespace.
var chartRelease = release.Options{Name: "tidal", Namespace: "tidal-system",
	Set: []string{"tls.keda=true", "keda.namespace=" + kedaNamespace}}

// chartAuths are the ClusterTriggerAuthentications the chart renders, once
// per test binary (Helm is slow to start).
var chartAuths struct {
	once sync.Once
	objs map[string]*kedav1alpha1.ClusterTriggerAuthentication
	err  error
}

// applyClusterAuth applies the chart's ClusterTriggerAuthentication name,
// as rendered by Helm, and writes the Secrets it reads in KEDA's namespace
// with the test's CA and KEDA's client certificate (this test's: a Secret
// an earlier test wrote is updated). Nothing goes in the tenant's
// namespace.
func (d *deployment) applyClusterAuth(ctx context.Context, t *testing.T, e exampleTrigger, name string) {
	t.Helper()
	chartAuths.once.Do(func() {
		objs, err := release.Render(ctx, chartRelease)
		if err != nil {
			chartAuths.err = err
			return
		}
		chartAuths.objs = map[string]*kedav1alpha1.ClusterTriggerAuthentication{}
		for _, o := range objs {
			if o.GetKind() != "ClusterTriggerAuthentication" {
				continue
			}
			cta := &kedav1alpha1.ClusterTriggerAuthentication{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, cta, true); err != nil {
				chartAuths.err = fmt.Errorf("the chart's ClusterTriggerAuthentication %s: %w", o.GetName(), err)
				return
			}
			chartAuths.objs[cta.Name] = cta
		}
	})
	if chartAuths.err != nil {
		t.Fatalf("render the chart: %v", chartAuths.err)
	}
	src := chartAuths.objs[name]
	if src == nil {
		t.Fatalf("%s: authenticationRef %s: the chart (%s) renders ClusterTriggerAuthentications %v, not %s", e, name,
			strings.Join(chartRelease.Set, ", "), sortedKeys(chartAuths.objs), name)
	}
	ensureNamespace(ctx, t, d.c, kedaNamespace)
	for _, s := range d.secretsFor(t, e, "ClusterTriggerAuthentication "+name, kedaNamespace, src.Spec.SecretTargetRef) {
		err := d.kube.Create(ctx, s)
		if alreadyExists(err) {
			err = d.kube.Update(ctx, s)
		}
		if err != nil {
			t.Fatalf("%s: write Secret %s/%s: %v", e, s.Namespace, s.Name, err)
		}
	}
	if err := d.kube.Create(ctx, src.DeepCopy()); err != nil && !alreadyExists(err) {
		t.Fatalf("%s: create ClusterTriggerAuthentication %s (KEDA's CRD schema): %v", e, name, err)
	}
}

func alreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// newScaler builds the trigger's scaler with KEDA's constructor for its
// type, closed when t ends.
func newScaler(t *testing.T, cfg *scalersconfig.ScalerConfig) scalers.Scaler {
	t.Helper()
	var (
		s   scalers.Scaler
		err error
	)
	switch cfg.TriggerType {
	case "external":
		s, err = scalers.NewExternalScaler(cfg)
	case "external-push":
		s, err = scalers.NewExternalPushScaler(cfg)
	default:
		t.Fatalf("trigger type %s: want external or external-push", cfg.TriggerType)
	}
	if err != nil {
		t.Fatalf("KEDA's %s scaler: %v", cfg.TriggerType, err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close KEDA's scaler: %v", err)
		}
	})
	return s
}
