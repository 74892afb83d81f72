package chart_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/test/cluster"
)

// TestNotesWarnings: helm install's NOTES end with a warning for each
// thing the values leave open, and with none a value closes. Rendered by a
// server-side dry run, so the chart's lookups and the API server's
// validation run as at a real install.
func TestNotesWarnings(t *testing.T) {
	c := cluster.Shared(t)
	installStubCRDs(t, c)
	ns := c.Namespace(t)
	const (
		plaintext = "PLAINTEXT gRPC"
		activator = "which speaks Knative's protocol without credentials, hold its 256 connections"
		noPolicy  = "networkPolicy.enabled is off"
		issuer    = "gets the decider's powers"
		shared    = "a ClusterIssuer is shared"
		kedaIss   = "KEDA's Certificate lives in keda"
		commonCN  = "common name"
		trials    = "tls.mode=generated keeps the CA's key in the cluster"
		strict    = "go run ./hack/certs -trust-domain cluster.local -namespace "
		brokers   = `collector.allowedBrokers holds "*:9092"`
		watchAll  = "watchNamespaces is empty"
	)
	for _, tt := range []struct {
		name      string
		set       []string
		want, not []string
	}{
		{"defaults", nil, []string{trials, strict, watchAll, noPolicy}, []string{commonCN, plaintext, activator, issuer, brokers}},
		{"plaintext", []string{"tls.mode=disabled"}, []string{plaintext}, []string{commonCN, trials, strict}},
		{"Knative mode with its NetworkPolicy off and no CIDRs", []string{"knative.enabled=true", "networkPolicy.enabled=false"}, []string{activator}, nil},
		{"Knative mode by default", []string{"knative.enabled=true"}, nil, []string{activator, noPolicy}},
		{"a shared cert-manager issuer", []string{"tls.mode=cert-manager", "tls.certManager.issuerRef.name=ca", "tls.certManager.issuerRef.kind=ClusterIssuer", "tls.keda=true"},
			[]string{issuer, shared}, []string{commonCN, trials, strict, kedaIss}},
		{"a namespaced issuer and KEDA", []string{"tls.mode=cert-manager", "tls.certManager.issuerRef.name=ca", "tls.keda=true"}, []string{issuer, kedaIss}, []string{shared}},
		{"a wide broker pattern", []string{"collector.allowedBrokers={*:9092}"}, []string{brokers}, nil},
		{"everything closed", []string{"tls.mode=secret", "networkPolicy.enabled=true", "watchNamespaces={" + ns + "}"}, nil,
			[]string{plaintext, activator, noPolicy, issuer, commonCN, trials, strict, brokers, watchAll, "Security notes"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"install", "notes", "charts/tidal", "--namespace", ns, "--dry-run=server"}
			for _, s := range tt.set {
				args = append(args, "--set", s)
			}
			out := helmOn(t, c, args...)
			i := strings.Index(out, "NOTES:")
			if i < 0 {
				t.Fatalf("no NOTES:\n%s", out)
			}
			notes := strings.Join(strings.Fields(out[i:]), " ")
			for _, w := range tt.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES lack %q:\n%s", w, out[i:])
				}
			}
			for _, w := range tt.not {
				if strings.Contains(notes, w) {
					t.Errorf("NOTES hold %q:\n%s", w, out[i:])
				}
			}
		})
	}
}

// installStubCRDs makes the API server serve cert-manager's Certificate and
// KEDA's ClusterTriggerAuthentication, which the chart renders in some
// modes, as schemaless kinds: enough for a dry run to accept them; and
// makes the namespaces the chart writes into besides the release's.
func installStubCRDs(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	for _, k := range []struct{ group, version, kind, plural, scope string }{
		{"cert-manager.io", "v1", "Certificate", "certificates", "Namespaced"},
		{"keda.sh", "v1alpha1", "ClusterTriggerAuthentication", "clustertriggerauthentications", "Cluster"},
	} {
		crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[4]s.%[1]s
spec:
  group: %[1]s
  scope: %[5]s
  names: {kind: %[3]s, plural: %[4]s}
  versions:
    - name: %[2]s
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, k.group, k.version, k.kind, k.plural, k.scope)
		if err := os.WriteFile(filepath.Join(dir, k.plural+".yaml"), []byte(crd), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.InstallCRDs(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"knative-serving", "keda"} {
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// TestNotesStrictTLSPath follows the production path the NOTES of a
// generated-mode release print, to the letter: the hack/certs command they
// give makes certificates whose URI SAN is each service's identity, also
// for a ServiceAccount named otherwise and another trust domain; the
// upgrade they give mounts exactly the Secrets their kubectl apply
// creates; and the three services run on them with mutual TLS, the
// decider's alone allowed to Scale, no identity read from a common name.
func TestNotesStrictTLSPath(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	const (
		releaseName = "strict"
		fullname    = "strict-tidal"
		trustDomain = "prod.example"
	)
	pusher := "spiffe://" + trustDomain + "/ns/knative-serving/sa/activator"
	installStubCRDs(t, c)
	set := []string{"tls.trustDomain=" + trustDomain, "decider.serviceAccount.name=custom-decider", "authz.pushers[0]=" + pusher, "tls.keda=true"}
	args := []string{"install", releaseName, "charts/tidal", "--namespace", ns, "--dry-run=server"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out := helmOn(t, c, args...)
	i := strings.Index(out, "NOTES:")
	if i < 0 {
		t.Fatalf("no NOTES:\n%s", out)
	}
	notes := out[i:]
	if flat := strings.Join(strings.Fields(notes), " "); !strings.Contains(flat, "Secret "+fullname+"-tls-ca in "+ns) {
		t.Errorf("the generated-mode warning does not say where the CA key is:\n%s", flat)
	}
	var certs, upgrade, apply []string
	for _, l := range strings.Split(notes, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 3 && f[0] == "go" && f[1] == "run" && f[2] == "./hack/certs":
			certs = f
		case len(f) > 2 && f[0] == "helm" && f[1] == "upgrade":
			upgrade = f
		case len(f) > 2 && f[0] == "kubectl" && f[1] == "apply":
			apply = f
		}
	}
	if certs == nil || upgrade == nil || apply == nil {
		t.Fatalf("NOTES lack the hack/certs, helm upgrade or kubectl apply line:\n%s", notes)
	}

	// The certificates, into a directory of the test's for the one the
	// command names (its last argument).
	dir := t.TempDir()
	outDir := certs[len(certs)-1]
	certs[len(certs)-1] = filepath.Join(dir, outDir)
	cmd := exec.Command(certs[0], certs[1:]...)
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(certs, " "), err, b)
	}
	// The upgrade's values on top of the install's (--reuse-values).
	if !slices.Contains(upgrade, "--reuse-values") || upgrade[2] != releaseName {
		t.Errorf("helm upgrade line %q: want release %s with --reuse-values", strings.Join(upgrade, " "), releaseName)
	}
	upgraded := slices.Clone(set)
	for j, a := range upgrade {
		if a == "--set" && j+1 < len(upgrade) {
			upgraded = append(upgraded, upgrade[j+1])
		}
	}
	if !slices.Contains(upgraded, "tls.mode=secret") {
		t.Fatalf("helm upgrade line %q does not switch to tls.mode=secret", strings.Join(upgrade, " "))
	}
	m := manifest(render(t, release{name: releaseName, namespace: ns, set: upgraded}))
	if jobs := m.ofKind("Job"); len(jobs) != 0 {
		t.Errorf("secret mode still renders the certificate Job %s", jobs[0].GetName())
	}

	dirs := map[string]string{}
	var kedaCert string
	for j, a := range apply {
		if a != "-f" || j+1 >= len(apply) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, apply[j+1]))
		if err != nil {
			t.Fatalf("kubectl apply -f %s: %v", apply[j+1], err)
		}
		var sec corev1.Secret
		if err := yaml.UnmarshalStrict(b, &sec); err != nil {
			t.Fatalf("%s: %v", apply[j+1], err)
		}
		if sec.Name == fullname+"-keda-tls" {
			// KEDA's, where its ClusterTriggerAuthentication reads it.
			cta := m.get(t, "ClusterTriggerAuthentication", fullname+"-keda")
			refs, _, _ := unstructured.NestedSlice(cta.Object, "spec", "secretTargetRef")
			if sec.Namespace != "keda" || len(refs) == 0 || refs[0].(map[string]any)["name"] != sec.Name {
				t.Errorf("%s: Secret %s/%s; want it in keda, read by ClusterTriggerAuthentication %s-keda (refs %v)", apply[j+1], sec.Namespace, sec.Name, fullname, refs)
			}
			kedaCert = writeSecret(t, &sec)
			continue
		}
		if sec.Namespace != ns {
			t.Errorf("%s: Secret in namespace %q, want the release's %q", apply[j+1], sec.Namespace, ns)
		}
		for _, comp := range components {
			if sec.Name == fullname+"-"+comp+"-tls" {
				dirs[comp] = writeSecret(t, &sec)
			}
		}
	}
	for _, comp := range components {
		if dirs[comp] == "" {
			t.Fatalf("kubectl apply line %q creates no Secret %s-%s-tls", strings.Join(apply, " "), fullname, comp)
		}
		dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", fullname+"-"+comp))
		if !slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == fullname+"-"+comp+"-tls"
		}) {
			t.Errorf("in secret mode %s mounts no Secret %s-%s-tls", dep.Name, fullname, comp)
		}
	}
	if uris := leafOf(t, dirs["decider"]).URIs; len(uris) != 1 || uris[0].String() != "spiffe://"+trustDomain+"/ns/"+ns+"/sa/custom-decider" {
		t.Errorf("the decider's certificate names %v; want its ServiceAccount custom-decider's identity as its one URI SAN", uris)
	}
	if kedaCert == "" {
		t.Errorf("kubectl apply line %q creates no Secret %s-keda-tls (tls.keda)", strings.Join(apply, " "), fullname)
	} else if want, env := "spiffe://"+trustDomain+"/ns/"+ns+"/sa/"+fullname+"-keda", envOf(typed[appsv1.Deployment](t, m.get(t, "Deployment", fullname+"-collector")).Spec.Template.Spec.Containers[0])["TIDAL_AUTHZ_KEDA"]; leafOf(t, kedaCert).URIs[0].String() != want || !strings.Contains(env, want) {
		t.Errorf("KEDA's certificate names %v, the collector lets %q call as KEDA; want %s in both", leafOf(t, kedaCert).URIs, env, want)
	}
	dirs["reader"] = filepath.Join(dir, outDir, "reader")
	// The activator's certificate from the same CA.
	dirs["pusher"] = issueFrom(t, filepath.Join(dir, outDir), pusher)
	testMTLS(t, m, fullname, ns, dirs)
}
