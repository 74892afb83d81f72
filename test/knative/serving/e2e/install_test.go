package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"knative.dev/serving/pkg/networking"

	"github.com/tidalscale/tidal/test/cluster"
)

// systemNamespace is where Knative Serving's controller runs and reads its
// ConfigMaps (SYSTEM_NAMESPACE).
const systemNamespace = "knative-serving"

// activatorIPs are the addresses the test writes into the activator-service
// Endpoints: TEST-NET-1 (RFC 5737), never routed, never dialled here (no
// kube-proxy runs); Knative's SKS reconciler only copies them.
var activatorIPs = []string{"192.0.2.1", "192.0.2.2"}

// moduleDirs returns the module-cache directories of Knative's modules at
// the versions test/knative's go.mod requires (`go mod download` fetches
// them through the module proxy when the cache lacks them).
func moduleDirs(ctx context.Context, mods ...string) (map[string]string, error) {
	dirs := map[string]string{}
	for _, mod := range mods {
		cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go mod download %s: %w", mod, err)
		}
		var m struct{ Dir, Error string }
		if err := json.Unmarshal(out, &m); err != nil {
			return nil, fmt.Errorf("go mod download %s: %w", mod, err)
		}
		if m.Dir == "" {
			return nil, fmt.Errorf("go mod download %s: no module directory: %s", mod, m.Error)
		}
		dirs[mod] = m.Dir
	}
	return dirs, nil
}

// knativeCRDs are the CustomResourceDefinitions Knative Serving's
// controller informs on, as module-relative paths: every serving.knative.dev
// and autoscaling.internal.knative.dev resource (config/core/300-resources),
// knative.dev/networking's Certificate, ClusterDomainClaim, Ingress and
// ServerlessService, and knative.dev/caching's Image.
var knativeCRDs = map[string][]string{
	"knative.dev/serving": {
		"config/core/300-resources/configuration.yaml",
		"config/core/300-resources/domain-mapping.yaml",
		"config/core/300-resources/metric.yaml",
		"config/core/300-resources/podautoscaler.yaml",
		"config/core/300-resources/revision.yaml",
		"config/core/300-resources/route.yaml",
		"config/core/300-resources/service.yaml",
	},
	"knative.dev/networking": {
		"config/certificate.yaml",
		"config/domain-claim.yaml",
		"config/ingress.yaml",
		"config/serverlessservice.yaml",
	},
	"knative.dev/caching": {"config/image.yaml"},
}

// knativeConfigMaps are Knative's own ConfigMap manifests in
// knative-serving, applied as shipped with the overrides on top.
var knativeConfigMaps = map[string][]string{
	"knative.dev/serving": {
		"config/core/configmaps/autoscaler.yaml",
		"config/core/configmaps/certmanager.yaml",
		"config/core/configmaps/defaults.yaml",
		"config/core/configmaps/deployment.yaml",
		"config/core/configmaps/domain.yaml",
		"config/core/configmaps/features.yaml",
		"config/core/configmaps/gc.yaml",
		"config/core/configmaps/leader-election.yaml",
		"config/core/configmaps/logging.yaml",
		"config/core/configmaps/observability.yaml",
		"config/core/configmaps/tracing.yaml",
	},
	"knative.dev/networking": {"config/config-network.yaml"},
}

// installKnative installs Knative Serving's CRDs and knative-serving
// namespace with its ConfigMaps (overrides holds keys set on top of
// Knative's manifests, by ConfigMap name) and the activator-service with
// its Endpoints.
func installKnative(ctx context.Context, c *cluster.Cluster, overrides map[string]map[string]string) error {
	dirs, err := moduleDirs(ctx, "knative.dev/serving", "knative.dev/networking", "knative.dev/caching")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "knative-serving-crds-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	for mod, files := range knativeCRDs {
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(dirs[mod], f))
			if err != nil {
				return fmt.Errorf("knative CRD: %w", err)
			}
			name := strings.ReplaceAll(mod, "/", "_") + "_" + filepath.Base(f)
			if err := os.WriteFile(filepath.Join(tmp, name), b, 0o600); err != nil {
				return err
			}
		}
	}
	if err := c.InstallCRDs(ctx, tmp); err != nil {
		return fmt.Errorf("knative CRDs: %w", err)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", systemNamespace, err)
	}
	for mod, files := range knativeConfigMaps {
		for _, f := range files {
			cm, err := readConfigMap(filepath.Join(dirs[mod], f))
			if err != nil {
				return err
			}
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			maps.Copy(cm.Data, overrides[cm.Name])
			cm.Namespace = systemNamespace
			if _, err := c.Client.CoreV1().ConfigMaps(systemNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("configmap %s: %w", cm.Name, err)
			}
		}
	}

	// The activator's Service without a selector, so kube-controller-manager
	// leaves its Endpoints to the test.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: networking.ActivatorServiceName, Namespace: systemNamespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			{Name: "http2", Port: 81, Protocol: corev1.ProtocolTCP},
		}},
	}
	if _, err := c.Client.CoreV1().Services(systemNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("activator service: %w", err)
	}
	eps := &corev1.Endpoints{ //nolint:staticcheck // Knative v0.50.0's SKS reconciler reads v1 Endpoints
		ObjectMeta: metav1.ObjectMeta{Name: networking.ActivatorServiceName, Namespace: systemNamespace},
		Subsets: []corev1.EndpointSubset{{ //nolint:staticcheck // Knative v0.50.0's SKS reconciler reads v1 Endpoints
			Ports: []corev1.EndpointPort{
				{Name: "http", Port: 8012, Protocol: corev1.ProtocolTCP},
				{Name: "http2", Port: 8013, Protocol: corev1.ProtocolTCP},
			},
		}},
	}
	for i, ip := range activatorIPs {
		eps.Subsets[0].Addresses = append(eps.Subsets[0].Addresses, corev1.EndpointAddress{IP: ip,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: systemNamespace, Name: fmt.Sprintf("activator-%d", i)}})
	}
	if _, err := c.Client.CoreV1().Endpoints(systemNamespace).Create(ctx, eps, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("activator endpoints: %w", err)
	}
	return nil
}

// readConfigMap reads the first YAML document of path as a ConfigMap.
func readConfigMap(path string) (*corev1.ConfigMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("knative configmap: %w", err)
	}
	defer func() { _ = f.Close() }()
	var cm corev1.ConfigMap
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&cm); err != nil {
		return nil, fmt.Errorf("knative configmap %s: %w", path, err)
	}
	if cm.Kind != "ConfigMap" || cm.Name == "" {
		return nil, fmt.Errorf("knative configmap %s: got %s %q", path, cm.Kind, cm.Name)
	}
	return &cm, nil
}
