package chart_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tidalscale/tidal/actuator/knative"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/collector/activator"
	"github.com/tidalscale/tidal/knativeconfig"
	rel "github.com/tidalscale/tidal/test/chart/release"
)

// The groups of Knative's objects tidal's Knative mode reads and writes.
var knativeGroups = []string{knautoscaling.SchemeGroupVersion.Group, "networking.internal.knative.dev"}

// knativeWant is what a rendering must hold for Knative's activators.
type knativeWant struct {
	release  release
	fullname string
	// namespace is Knative's; "" means Knative mode is off.
	namespace string
	// clusterDomain ends the ExternalName; "" means cluster.local.
	clusterDomain string
	// createService says whether the chart makes Knative's autoscaler
	// Service; port is the collector's activator container port.
	createService bool
	port          int32
	annotations   map[string]string
	// env are collector environment variables and their values.
	env map[string]string
}

func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func containerPort(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// checkKnative checks the objects that let Knative's activators reach the
// collectors (docs/knative.md), the collector's activator settings and
// the RBAC rules on Knative's groups.
func checkKnative(t *testing.T, m manifest, w knativeWant) {
	t.Helper()
	podLabels := map[string]labels.Set{}
	containers := map[string]corev1.Container{}
	for _, c := range components {
		dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", w.fullname+"-"+c))
		podLabels[c] = dep.Spec.Template.Labels
		containers[c] = dep.Spec.Template.Spec.Containers[0]
	}
	env := envOf(containers["collector"])
	own := m.find("Service", w.fullname+"-autoscaler")
	kn := m.find("Service", "autoscaler")
	port, hasPort := containerPort(containers["collector"], "activator")
	collectorRules := knativeRulesOf(t, m, w.fullname+"-collector")
	actuatorRules := knativeRulesOf(t, m, w.fullname+"-actuator")

	if w.namespace == "" {
		if own != nil || kn != nil {
			t.Errorf("Knative mode off, but Services %v rendered", m.names())
		}
		for k := range env {
			if strings.HasPrefix(k, "TIDAL_ACTIVATOR_") || strings.HasPrefix(k, "TIDAL_KNATIVE") {
				t.Errorf("Knative mode off, but the collector has %s", k)
			}
		}
		if hasPort {
			t.Errorf("Knative mode off, but the collector has a port named activator")
		}
		if len(collectorRules)+len(actuatorRules) != 0 {
			t.Errorf("Knative mode off, but rules on Knative's groups: collector %v, actuator %v", collectorRules, actuatorRules)
		}
		return
	}

	if !hasPort || port != w.port {
		t.Errorf("collector port activator = %d (present %v), want %d", port, hasPort, w.port)
	}
	if got, want := env["TIDAL_ACTIVATOR_LISTEN"], fmt.Sprintf(":%d", port); got != want {
		t.Errorf("TIDAL_ACTIVATOR_LISTEN = %q, want %q (the activator container port)", got, want)
	}
	for k, want := range w.env {
		if got := env[k]; got != want {
			t.Errorf("collector %s = %q, want %q", k, got, want)
		}
	}
	domain := w.clusterDomain
	if domain == "" {
		domain = "cluster.local"
	}
	if got := envOf(containers["actuator"])["TIDAL_CLUSTER_DOMAIN"]; got != domain {
		t.Errorf("actuator TIDAL_CLUSTER_DOMAIN = %q, want %q (its activator probe)", got, domain)
	}
	// The actuator's rules on Knative's groups are exactly knative.Rules();
	// the collector's, list and watch of PodAutoscalers.
	if got, want := triples(actuatorRules), triples(knative.Rules()); !maps.Equal(got, want) {
		t.Errorf("actuator's rules on Knative's groups: %v, want knative.Rules(): %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	if got, want := triples(collectorRules), collectorKnativeTriples(); !maps.Equal(got, want) {
		t.Errorf("collector's rules on Knative's groups: %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}

	// target is the Service that selects the collector pods for the
	// activators.
	var target *corev1.Service
	inKnative := w.release.namespace == w.namespace
	switch {
	case inKnative && own != nil:
		t.Errorf("release in Knative's namespace renders %s too; want the autoscaler Service alone", own.GetName())
	case !inKnative && own == nil:
		t.Fatalf("release beside Knative renders no %s-autoscaler Service; have %v", w.fullname, m.names())
	case !inKnative:
		target = typed[corev1.Service](t, own)
		if target.Namespace != w.release.namespace || target.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("Service %s: namespace %q type %q, want %q, ClusterIP (never exposed by collector.service.type)",
				target.Name, target.Namespace, target.Spec.Type, w.release.namespace)
		}
	}
	if !w.createService {
		if kn != nil {
			t.Errorf("knative.autoscalerService.create=false, but Service autoscaler rendered")
		}
	} else {
		if kn == nil {
			t.Fatalf("no Service autoscaler rendered; have %v", m.names())
		}
		svc := typed[corev1.Service](t, kn)
		if svc.Namespace != w.namespace {
			t.Errorf("Service autoscaler in %q, want Knative's %q", svc.Namespace, w.namespace)
		}
		if want := w.annotations; !maps.Equal(svc.Annotations, want) {
			t.Errorf("Service autoscaler annotations %v, want %v", svc.Annotations, want)
		}
		// Activators dial port 8080 of the name (cmd/activator/main.go,
		// knative.dev/serving v0.50.0).
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
			t.Errorf("Service autoscaler ports %+v, want 8080 alone", svc.Spec.Ports)
		}
		if inKnative {
			if svc.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("Service autoscaler type %q, want ClusterIP selecting the collectors", svc.Spec.Type)
			}
			target = svc
		} else {
			want := fmt.Sprintf("%s-autoscaler.%s.svc.%s", w.fullname, w.release.namespace, domain)
			if svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName != want || len(svc.Spec.Selector) != 0 {
				t.Errorf("Service autoscaler type %q externalName %q selector %v, want ExternalName %q and no selector",
					svc.Spec.Type, svc.Spec.ExternalName, svc.Spec.Selector, want)
			}
		}
	}
	if target == nil {
		return
	}
	sel := labels.SelectorFromSet(target.Spec.Selector)
	for _, c := range components {
		if got := len(target.Spec.Selector) > 0 && sel.Matches(podLabels[c]); got != (c == "collector") {
			t.Errorf("Service %s/%s selects the %s pods = %v, want %v", target.Namespace, target.Name, c, got, c == "collector")
		}
	}
	if len(target.Spec.Ports) != 1 {
		t.Fatalf("Service %s ports %+v, want one", target.Name, target.Spec.Ports)
	}
	p := target.Spec.Ports[0]
	if got, ok := containerPort(containers["collector"], p.TargetPort.String()); p.Port != 8080 || !ok || got != port {
		t.Errorf("Service %s port %d → %s: want 8080 → the collector's activator port %d", target.Name, p.Port, p.TargetPort.String(), port)
	}
	// The ServiceMonitor scrapes port http of the three services' Services;
	// this one's http port is the websocket.
	if c := target.Labels["app.kubernetes.io/component"]; slices.Contains(components, c) {
		t.Errorf("Service %s has component label %q: the ServiceMonitor would scrape the websocket", target.Name, c)
	}
}

// knativeRulesOf returns the rules of ClusterRole name on Knative's groups.
func knativeRulesOf(t *testing.T, m manifest, name string) []rbacv1.PolicyRule {
	t.Helper()
	o := m.find("ClusterRole", name)
	if o == nil {
		return nil
	}
	var out []rbacv1.PolicyRule
	for _, r := range typed[rbacv1.ClusterRole](t, o).Rules {
		if slices.ContainsFunc(r.APIGroups, func(g string) bool { return slices.Contains(knativeGroups, g) }) {
			out = append(out, r)
		}
	}
	return out
}

// triples expands rules into group/resource[/name]:verb keys.
func triples(rules []rbacv1.PolicyRule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					for _, v := range r.Verbs {
						out[g+"/"+res+"/"+n+":"+v] = true
					}
				}
			}
		}
	}
	return out
}

// collectorKnativeTriples is what the collector's Knative informer needs
// (collector/targets): list and watch Knative's PodAutoscalers.
func collectorKnativeTriples() map[string]bool {
	return triples([]rbacv1.PolicyRule{{APIGroups: []string{knautoscaling.SchemeGroupVersion.Group}, Resources: []string{"podautoscalers"}, Verbs: []string{"list", "watch"}}})
}

// knativeServingDir is knative.dev/serving's directory in the module cache,
// at the version test/benchknative requires (v0.50.0), as
// apis/knative/knativetest finds Knative's CRDs.
var knativeServingDir = sync.OnceValues(func() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "knative.dev/serving")
	cmd.Dir = filepath.Join(repoRoot(), "test", "benchknative")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download knative.dev/serving in %s: %w", cmd.Dir, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod download knative.dev/serving: %w", err)
	}
	if mod.Dir == "" {
		return "", fmt.Errorf("go mod download knative.dev/serving: no module directory: %s", mod.Error)
	}
	return mod.Dir, nil
})

// knativePodLabels are the pod labels of a Deployment in Knative Serving's
// own release manifests (config/core/deployments/FILE).
func knativePodLabels(t *testing.T, file string) labels.Set {
	t.Helper()
	dir, err := knativeServingDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config", "core", "deployments", file))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := rel.Decode(string(b))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			return typed[appsv1.Deployment](t, o).Spec.Template.Labels
		}
	}
	t.Fatalf("%s holds no Deployment", file)
	return nil
}

// checkActivatorIngress checks the rules of np on the port named activator:
// with want, exactly one admitting Knative's activator pods, as Knative
// v0.50.0's own manifest labels them, in namespace knativeNS and no other
// pod there or elsewhere; without, none.
func checkActivatorIngress(t *testing.T, np *networkingv1.NetworkPolicy, knativeNS string, want bool) {
	t.Helper()
	var rules []networkingv1.NetworkPolicyIngressRule
	for _, r := range np.Spec.Ingress {
		if slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.String() == "activator" }) {
			rules = append(rules, r)
		}
	}
	if !want {
		if len(rules) != 0 {
			t.Errorf("NetworkPolicy %s admits %+v on port activator; want no such rule", np.Name, rules)
		}
		return
	}
	if len(rules) != 1 || len(rules[0].Ports) != 1 || len(rules[0].From) != 1 {
		t.Fatalf("NetworkPolicy %s rules on port activator %+v, want one rule, one port, one peer", np.Name, rules)
	}
	peer := rules[0].From[0]
	if peer.NamespaceSelector == nil || peer.PodSelector == nil || peer.IPBlock != nil {
		t.Fatalf("NetworkPolicy %s activator peer %+v: want a namespace and a pod selector in one peer (both must hold)", np.Name, peer)
	}
	nsSel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	podSel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	// The API server labels every namespace with its name.
	nsLabels := func(name string) labels.Set { return labels.Set{corev1.LabelMetadataName: name} }
	if !nsSel.Matches(nsLabels(knativeNS)) || nsSel.Matches(nsLabels("default")) || nsSel.Matches(labels.Set{}) {
		t.Errorf("NetworkPolicy %s activator namespaces %s: want %s alone", np.Name, nsSel, knativeNS)
	}
	if act := knativePodLabels(t, "activator.yaml"); !podSel.Matches(act) {
		t.Errorf("NetworkPolicy %s activator pods %s do not match Knative's activator pods %v", np.Name, podSel, act)
	}
	for _, other := range []string{"autoscaler.yaml", "controller.yaml", "webhook.yaml"} {
		if l := knativePodLabels(t, other); podSel.Matches(l) {
			t.Errorf("NetworkPolicy %s activator pods %s also match Knative's %s pods %v", np.Name, podSel, other, l)
		}
	}
}

// TestKnativeTemplate renders Knative mode over its values: the Service
// Knative's activators dial, in Knative's namespace or beside it, the
// collector's activator port and settings, and the RBAC on Knative's groups.
func TestKnativeTemplate(t *testing.T) {
	t.Parallel()
	on := "knative.enabled=true"
	tests := []struct {
		name string
		want knativeWant
	}{
		{"off", knativeWant{release: release{name: "tidal", namespace: "tidal-system"}, fullname: "tidal"}},
		{"beside Knative", knativeWant{
			release: release{name: "tidal", namespace: "tidal-system", set: []string{on}}, fullname: "tidal",
			namespace: "knative-serving", createService: true, port: 8080,
			env: map[string]string{"TIDAL_KNATIVE": "true", "TIDAL_KNATIVE_CLASSES": knautoscaling.ClassKPA},
		}},
		{"in Knative's namespace", knativeWant{
			release: release{name: "tidal", namespace: "knative-serving", set: []string{on}}, fullname: "tidal",
			namespace: "knative-serving", createService: true, port: 8080,
		}},
		{"own namespace, domain, port and bounds", knativeWant{
			release: release{name: "edge", namespace: "ops", set: []string{
				on, "knative.namespace=serving", "knative.clusterDomain=corp.example", "knative.activator.port=8081",
				"knative.activator.allowedCIDRs[0]=10.0.0.0/8", "knative.activator.allowedCIDRs[1]=fd00::/8",
				"knative.activator.maxConnections=64", "knative.activator.maxFrameBytes=1048576",
				"knative.activator.statRate=2500", "knative.activator.backlogWait=500ms",
				"knative.autoscalerService.annotations.team=platform", "knative.classes={kpa.autoscaling.knative.dev,kpa.autoscaling.tidal.dev}",
			}},
			fullname: "edge-tidal", namespace: "serving", clusterDomain: "corp.example", createService: true, port: 8081,
			annotations: map[string]string{"team": "platform"},
			env: map[string]string{
				"TIDAL_ACTIVATOR_ALLOWED_CIDRS":   "10.0.0.0/8,fd00::/8",
				"TIDAL_ACTIVATOR_MAX_CONNECTIONS": "64",
				"TIDAL_ACTIVATOR_MAX_FRAME_BYTES": "1048576",
				"TIDAL_ACTIVATOR_STAT_RATE":       "2500",
				"TIDAL_ACTIVATOR_BACKLOG_WAIT":    "500ms",
				"TIDAL_KNATIVE_CLASSES":           "kpa.autoscaling.knative.dev,kpa.autoscaling.tidal.dev",
			},
		}},
		{"Service kept by the operator", knativeWant{
			release:  release{name: "tidal", namespace: "tidal-system", set: []string{on, "knative.autoscalerService.create=false"}},
			fullname: "tidal", namespace: "knative-serving", port: 8080,
		}},
		{"Service kept, in Knative's namespace", knativeWant{
			release:  release{name: "tidal", namespace: "knative-serving", set: []string{on, "knative.autoscalerService.create=false"}},
			fullname: "tidal", namespace: "knative-serving", port: 8080,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := manifest(render(t, tt.want.release))
			checkKnative(t, m, tt.want)
			configRoles := 0
			for _, o := range m {
				ns := o.GetNamespace()
				knativeService := o.GetKind() == "Service" && o.GetName() == "autoscaler" && ns == tt.want.namespace
				knativeConfig := isKnativeConfigRBAC(o) && ns == tt.want.namespace
				if ns != "" && ns != tt.want.release.namespace && !knativeService && !knativeConfig {
					t.Errorf("%s %s in namespace %q; only Knative's autoscaler Service and the Roles on its ConfigMaps leave the release's", o.GetKind(), o.GetName(), ns)
				}
				if knativeConfig && o.GetKind() == "Role" {
					configRoles++
					if got, want := triples(typed[rbacv1.Role](t, o).Rules), triples(knativeconfig.Rules()); !maps.Equal(got, want) {
						t.Errorf("Role %s: %v, want knativeconfig.Rules(): %v", o.GetName(), slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
					}
				}
			}
			if want := map[bool]int{true: 2}[tt.want.namespace != ""]; configRoles != want {
				t.Errorf("%d Roles on Knative's ConfigMaps, want %d (the collector's and the actuator's with Knative mode on)", configRoles, want)
			}
		})
	}
}

// TestKnativeActivatorFlags proves the chart's activator settings are the
// collector's own flags: every TIDAL_ACTIVATOR_ variable the chart sets
// names a flag of collector/activator.Config (the binary would ignore one
// that does not), every such flag is set, the collector accepts the values,
// and the chart's defaults are the flags' defaults, so values.yaml never
// drifts from the binary.
func TestKnativeActivatorFlags(t *testing.T) {
	t.Parallel()
	const prefix = "activator-"
	var defaults activator.Config
	defaults.RegisterFlagsWithPrefix(prefix, flag.NewFlagSet("defaults", flag.ContinueOnError))
	tests := []struct {
		name string
		set  []string
		// defaults says the values must be the flags' defaults.
		defaults bool
	}{
		{"defaults", nil, true},
		{"every bound set", []string{
			"knative.activator.allowedCIDRs[0]=10.0.0.0/8", "knative.activator.maxConnections=64",
			"knative.activator.maxFrameBytes=67108864", "knative.activator.maxMessages=500",
			"knative.activator.statRate=1000000", "knative.activator.statBurst=4000000",
			"knative.activator.idleTimeout=1m30s", "knative.activator.backlogWait=9.5s",
			"knative.activator.forwardTimeout=250ms", "knative.activator.forwardQueue=64",
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := release{name: "tidal", namespace: "tidal-system", set: append([]string{"knative.enabled=true"}, tt.set...)}
			m := manifest(render(t, r))
			dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", "tidal-collector"))
			fs := flag.NewFlagSet("collector", flag.ContinueOnError)
			var got activator.Config
			got.RegisterFlagsWithPrefix(prefix, fs)
			set := map[string]bool{}
			for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
				rest, ok := strings.CutPrefix(e.Name, "TIDAL_ACTIVATOR_")
				if !ok {
					continue
				}
				name := prefix + strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
				if err := fs.Set(name, e.Value); err != nil {
					t.Errorf("%s=%q: --%s refuses it: %v", e.Name, e.Value, name, err)
				}
				set[name] = true
			}
			fs.VisitAll(func(f *flag.Flag) {
				// The default of --activator-allowed-cidrs (any) is no
				// value at all.
				optional := f.Name == prefix+"allowed-cidrs" && tt.defaults
				if !set[f.Name] && !optional {
					t.Errorf("--%s is not set by the chart", f.Name)
				}
			})
			if err := got.Validate(prefix); err != nil {
				t.Errorf("the collector refuses the chart's activator settings: %v", err)
			}
			if !got.Enabled() {
				t.Errorf("the activator endpoint is off")
			}
			if !tt.defaults {
				return
			}
			want := defaults
			want.Listen = got.Listen
			if !reflect.DeepEqual(got, want) {
				t.Errorf("chart defaults\n%+v\nwant the collector's\n%+v", got, want)
			}
		})
	}
}

// isKnativeConfigRBAC reports whether o is the Role or RoleBinding that
// lets the collector or the actuator follow Knative's ConfigMaps
// (rbac-knative-config.yaml), which lives in Knative's namespace.
func isKnativeConfigRBAC(o *unstructured.Unstructured) bool {
	return (o.GetKind() == "Role" || o.GetKind() == "RoleBinding") && strings.HasSuffix(o.GetName(), "-knative-config")
}
