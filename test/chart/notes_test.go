package chart_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		brokers   = `collector.allowedBrokers holds "*:9092"`
		watchAll  = "watchNamespaces is empty"
	)
	for _, tt := range []struct {
		name      string
		set       []string
		want, not []string
	}{
		{"defaults", nil, []string{commonCN, watchAll, noPolicy}, []string{plaintext, activator, issuer, brokers}},
		{"plaintext", []string{"tls.mode=disabled"}, []string{plaintext}, []string{commonCN}},
		{"Knative mode with its NetworkPolicy off and no CIDRs", []string{"knative.enabled=true", "networkPolicy.enabled=false"}, []string{activator}, nil},
		{"Knative mode by default", []string{"knative.enabled=true"}, nil, []string{activator, noPolicy}},
		{"a shared cert-manager issuer", []string{"tls.mode=cert-manager", "tls.certManager.issuerRef.name=ca", "tls.certManager.issuerRef.kind=ClusterIssuer", "tls.keda=true"},
			[]string{issuer, shared}, []string{commonCN, kedaIss}},
		{"a namespaced issuer and KEDA", []string{"tls.mode=cert-manager", "tls.certManager.issuerRef.name=ca", "tls.keda=true"}, []string{issuer, kedaIss}, []string{shared}},
		{"a wide broker pattern", []string{"collector.allowedBrokers={*:9092}"}, []string{brokers}, nil},
		{"everything closed", []string{"tls.mode=secret", "networkPolicy.enabled=true", "watchNamespaces={" + ns + "}"}, nil,
			[]string{plaintext, activator, noPolicy, issuer, commonCN, brokers, watchAll, "Security notes"}},
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
