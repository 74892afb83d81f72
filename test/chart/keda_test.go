package chart_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/test/cluster"
)

// TestKEDACertificate: with tls.keda the chart makes KEDA a client
// certificate of its own identity, signed by the release's CA, in KEDA's
// own namespace alone, where one ClusterTriggerAuthentication reads it for
// every tenant's ScaledObjects (no copy in a tenant's namespace), tells the
// services that identity may call the external scaler, and lets KEDA's
// pods through the collector's NetworkPolicy.
func TestKEDACertificate(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	// KEDA's namespace, of this test alone.
	kedaNS := "keda-" + ns[strings.LastIndex(ns, "-")+1:]
	ensureNamespace(t, c, kedaNS)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), kedaNS, metav1.DeleteOptions{})
	})
	m, _ := install(t, c, release{name: "tidal", namespace: ns, set: []string{"tls.keda=true", "keda.namespace=" + kedaNS,
		"networkPolicy.enabled=true", "authz.keda={spiffe://cluster.local/ns/keda/sa/keda-operator}"}}, false)
	runCertificatesJob(t, c, m)
	caSec := secretData(t, c, ns, "tidal-tls-ca")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caSec.Data["tls.crt"]) {
		t.Fatal("tidal-tls-ca holds no certificate")
	}
	sec := secretData(t, c, kedaNS, "tidal-keda-tls")
	leaf := leafOf(t, writeSecret(t, sec))
	want := "spiffe://cluster.local/ns/" + ns + "/sa/tidal-keda"
	if id, err := identity.FromCertificate(leaf); err != nil || id.String() != want {
		t.Errorf("identity %v, %v; want %s as the URI SAN", id, err, want)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("KEDA's certificate as a client's: %v", err)
	}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("Secret tidal-keda-tls has no %s for the TriggerAuthentication", k)
		}
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Get(context.Background(), "tidal-keda-tls", metav1.GetOptions{}); err == nil {
		t.Errorf("Secret tidal-keda-tls also in the release namespace %s; want it in KEDA's namespace %s alone", ns, kedaNS)
	}
	cta := m.get(t, "ClusterTriggerAuthentication", "tidal-keda")
	refs, _, _ := unstructured.NestedSlice(cta.Object, "spec", "secretTargetRef")
	got := map[string]string{}
	for _, r := range refs {
		r := r.(map[string]any)
		if r["name"] != "tidal-keda-tls" {
			t.Errorf("ClusterTriggerAuthentication reads Secret %v, want tidal-keda-tls", r["name"])
		}
		got[fmt.Sprint(r["parameter"])] = fmt.Sprint(r["key"])
	}
	if want := map[string]string{"caCert": "ca.crt", "tlsClientCert": "tls.crt", "tlsClientKey": "tls.key"}; !maps.Equal(got, want) {
		t.Errorf("ClusterTriggerAuthentication parameters %v, want %v", got, want)
	}
	np := typed[networkingv1.NetworkPolicy](t, m.get(t, "NetworkPolicy", "tidal-collector"))
	admitted := false
	for _, rule := range np.Spec.Ingress {
		for _, from := range rule.From {
			if from.NamespaceSelector != nil && from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == kedaNS {
				admitted = len(rule.Ports) == 1 && rule.Ports[0].Port.String() == "grpc"
			}
		}
	}
	if !admitted {
		t.Errorf("the collector's NetworkPolicy does not admit %s to its gRPC port: %+v", kedaNS, np.Spec.Ingress)
	}
	dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", "tidal-collector"))
	authz := ""
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "TIDAL_AUTHZ_KEDA" {
			authz = e.Value
		}
	}
	if got := authz; got != "spiffe://cluster.local/ns/keda/sa/keda-operator,"+want {
		t.Errorf("collector's TIDAL_AUTHZ_KEDA = %q, want authz.keda and the chart's KEDA identity", got)
	}
}

// TestAllowedBrokers: collector.allowedBrokers reaches the collector alone
// as --allowed-brokers, and an empty list sets nothing, leaving the
// binary's default (kafka.brokers alone).
func TestAllowedBrokers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		release  release
		fullname string
		// want is the collector's TIDAL_ALLOWED_BROKERS; "" means unset.
		want string
	}{
		{"defaults", release{name: "tidal", namespace: "tidal-system"}, "tidal", ""},
		{"all options", release{name: "prod", namespace: "autoscaling", valuesFiles: []string{"test/chart/testdata/all-options.yaml"}}, "tidal-all",
			"*.kafka.svc.cluster.local:9092,kafka-[0-2].example.com:9093"},
		{"one pattern", release{name: "tidal", namespace: "tidal-system", set: []string{"collector.allowedBrokers={kafka.team-a.svc:9092}"}}, "tidal",
			"kafka.team-a.svc:9092"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := manifest(render(t, tt.release))
			for _, c := range components {
				dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", tt.fullname+"-"+c))
				var got *corev1.EnvVar
				for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
					if e.Name == "TIDAL_ALLOWED_BROKERS" {
						got = &e
					}
				}
				want := ""
				if c == "collector" {
					want = tt.want
				}
				switch {
				case want == "" && got != nil:
					t.Errorf("%s: TIDAL_ALLOWED_BROKERS = %q, want it unset", c, got.Value)
				case want != "" && got == nil:
					t.Errorf("%s: TIDAL_ALLOWED_BROKERS unset, want %q", c, want)
				case want != "" && got.Value != want:
					t.Errorf("%s: TIDAL_ALLOWED_BROKERS = %q, want %q", c, got.Value, want)
				}
			}
		})
	}
}
