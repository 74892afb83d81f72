package chart_test

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// scenario is one set of values and what the rendering must hold.
type scenario struct {
	name    string
	release release
	// fullname is what every resource name starts with.
	fullname string
	replicas map[string]int64
	// serviceAccounts are the pods' ServiceAccount names; created says
	// whether the chart creates them.
	serviceAccounts map[string]string
	createAccounts  bool
	pdb             map[string]bool
	rbac            bool
	// tlsSecrets are the services' TLS Secrets; nil means mTLS is off.
	tlsSecrets map[string]string
	// env are environment variables every service must have, and their values.
	env            map[string]string
	networkPolicy  bool
	serviceMonitor bool
	scrapeAnnots   bool
	images         map[string]string
	// knativeNS is where the release puts Knative's autoscaler Service;
	// "" means Knative mode is off.
	knativeNS string
	// statusInterval is the actuator's --status-interval; "" means the
	// default, 3s.
	statusInterval string
	// liveReads are the actuator's --live-read-rate, -burst,
	// -namespace-rate and -namespace-burst; nil means the defaults.
	liveReads []string
}

var scenarios = []scenario{
	{
		name:     "defaults",
		release:  release{name: "tidal", namespace: "tidal-system"},
		fullname: "tidal",
		replicas: map[string]int64{"collector": 2, "decider": 2, "actuator": 2},
		serviceAccounts: map[string]string{
			"collector": "tidal-collector", "decider": "tidal-decider", "actuator": "tidal-actuator",
		},
		createAccounts: true,
		pdb:            map[string]bool{"collector": true, "decider": true, "actuator": true},
		rbac:           true,
		tlsSecrets:     map[string]string{"collector": "tidal-collector-tls", "decider": "tidal-decider-tls", "actuator": "tidal-actuator-tls"},
		env: map[string]string{
			"TIDAL_AUTHZ_TRUST_DOMAIN":            "cluster.local",
			"TIDAL_AUTHZ_COLLECTORS":              "spiffe://cluster.local/ns/tidal-system/sa/tidal-collector",
			"TIDAL_AUTHZ_DECIDERS":                "spiffe://cluster.local/ns/tidal-system/sa/tidal-decider",
			"TIDAL_AUTHZ_ACTUATORS":               "spiffe://cluster.local/ns/tidal-system/sa/tidal-actuator",
			"TIDAL_AUTHZ_MUTATING_RATE":           "5000",
			"TIDAL_AUTHZ_READ_RATE":               "50",
			"TIDAL_AUTHZ_READ_BURST":              "200",
			"TIDAL_AUTHZ_NAMESPACE_READ_RATE":     "20",
			"TIDAL_AUTHZ_NAMESPACE_MUTATING_RATE": "500",
			"TIDAL_AUTHZ_NAMESPACE_WATCHES":       "32",
			// The chart's reader certificate reads every namespace.
			"TIDAL_AUTHZ_READERS":          "spiffe://cluster.local/ns/tidal-system/sa/tidal-reader",
			"TIDAL_MAX_CONCURRENT_STREAMS": "1024",
		},
		scrapeAnnots: true,
		images: map[string]string{
			"collector": "ghcr.io/tidalscale/tidal-collector:0.1.0",
			"decider":   "ghcr.io/tidalscale/tidal-decider:0.1.0",
			"actuator":  "ghcr.io/tidalscale/tidal-actuator:0.1.0",
		},
	},
	{
		name:           "all options",
		release:        release{name: "prod", namespace: "autoscaling", valuesFiles: []string{"test/chart/testdata/all-options.yaml"}},
		fullname:       "tidal-all",
		statusInterval: "5s",
		liveReads:      []string{"8", "16", "2", "4"},
		replicas:       map[string]int64{"collector": 3, "decider": 4, "actuator": 3},
		serviceAccounts: map[string]string{
			"collector": "tidal-collector-sa", "decider": "tidal-all-decider", "actuator": "tidal-all-actuator",
		},
		createAccounts: true,
		pdb:            map[string]bool{"collector": true, "decider": true, "actuator": false},
		rbac:           true,
		tlsSecrets:     map[string]string{"collector": "tidal-collector-certs", "decider": "tidal-all-decider-tls", "actuator": "tidal-all-actuator-tls"},
		env: map[string]string{
			"TIDAL_AUTHZ_TRUST_DOMAIN":                 "example.org",
			"TIDAL_AUTHZ_COLLECTORS":                   "spiffe://example.org/ns/autoscaling/sa/tidal-collector-sa",
			"TIDAL_AUTHZ_DECIDERS":                     "spiffe://example.org/ns/autoscaling/sa/tidal-all-decider",
			"TIDAL_AUTHZ_PUSHERS":                      "spiffe://example.org/ns/knative-serving/sa/activator",
			"TIDAL_AUTHZ_OPERATORS":                    "spiffe://example.org/ns/ops/sa/oncall,spiffe://example.org/ns/ops/sa/deployer",
			"TIDAL_AUTHZ_KEDA":                         "spiffe://example.org/ns/keda/sa/keda-operator",
			"TIDAL_AUTHZ_ALLOW":                        "/tidal.decider.v1.DeciderService/=spiffe://example.org/ns/ops/sa/debugger;/tidal.actuator.v1.ActuatorService/Scale=spiffe://example.org/ns/ci/sa/load-test",
			"TIDAL_AUTHZ_MUTATING_RATE":                "800",
			"TIDAL_AUTHZ_MUTATING_BURST":               "1600",
			"TIDAL_AUTHZ_READ_RATE":                    "20",
			"TIDAL_AUTHZ_READ_BURST":                   "40",
			"TIDAL_AUTHZ_NAMESPACE_READ_RATE":          "5",
			"TIDAL_AUTHZ_NAMESPACE_MUTATING_RATE":      "100",
			"TIDAL_AUTHZ_NAMESPACE_MUTATING_BURST":     "300",
			"TIDAL_AUTHZ_NAMESPACE_READ_BURST":         "10",
			"TIDAL_AUTHZ_NAMESPACE_WATCHES_PER_CALLER": "2",
			"TIDAL_AUTHZ_NAMESPACE_WATCHES":            "16",
			"TIDAL_AUTHZ_DEPLOYERS":                    "spiffe://example.org/ns/ci/sa/riff",
			"TIDAL_AUTHZ_READERS":                      "spiffe://example.org/ns/monitoring/sa/grafana",
			"TIDAL_AUTHZ_NAMESPACES":                   "spiffe://example.org/ns/team-a/sa/dashboard=team-a,team-a-staging",
			"TIDAL_MAX_CONCURRENT_STREAMS":             "256",
		},
		networkPolicy:  true,
		serviceMonitor: true,
		scrapeAnnots:   true,
		images: map[string]string{
			"collector": "registry.example.com/custom/collector:1.2.4",
			"decider":   "registry.example.com/tidal/tidal-decider:1.2.3",
			"actuator":  "registry.example.com/tidal/tidal-actuator:1.2.3",
		},
	},
	{
		name: "knative",
		release: release{name: "kn", namespace: "tidal-system", set: []string{
			"knative.enabled=true", "networkPolicy.enabled=true",
		}},
		fullname: "kn-tidal",
		replicas: map[string]int64{"collector": 2, "decider": 2, "actuator": 2},
		serviceAccounts: map[string]string{
			"collector": "kn-tidal-collector", "decider": "kn-tidal-decider", "actuator": "kn-tidal-actuator",
		},
		createAccounts: true,
		pdb:            map[string]bool{"collector": true, "decider": true, "actuator": true},
		rbac:           true,
		tlsSecrets:     map[string]string{"collector": "kn-tidal-collector-tls", "decider": "kn-tidal-decider-tls", "actuator": "kn-tidal-actuator-tls"},
		env: map[string]string{
			"TIDAL_AUTHZ_COLLECTORS": "spiffe://cluster.local/ns/tidal-system/sa/kn-tidal-collector",
		},
		networkPolicy: true,
		scrapeAnnots:  true,
		images: map[string]string{
			"collector": "ghcr.io/tidalscale/tidal-collector:0.1.0",
			"decider":   "ghcr.io/tidalscale/tidal-decider:0.1.0",
			"actuator":  "ghcr.io/tidalscale/tidal-actuator:0.1.0",
		},
		knativeNS: "knative-serving",
	},
	{
		name: "everything off",
		release: release{name: "bare", namespace: "default", set: []string{
			"rbac.create=false", "metrics.podAnnotations=false",
			"collector.serviceAccount.create=false", "collector.serviceAccount.name=sa-c",
			"decider.serviceAccount.create=false", "decider.serviceAccount.name=sa-d",
			"actuator.serviceAccount.create=false", "actuator.serviceAccount.name=sa-a",
			"collector.podDisruptionBudget.enabled=false", "decider.podDisruptionBudget.enabled=false",
			"actuator.podDisruptionBudget.enabled=false", "actuator.replicas=0", "tls.mode=disabled",
		}},
		fullname:        "bare-tidal",
		replicas:        map[string]int64{"collector": 2, "decider": 2, "actuator": 0},
		serviceAccounts: map[string]string{"collector": "sa-c", "decider": "sa-d", "actuator": "sa-a"},
		pdb:             map[string]bool{},
		images: map[string]string{
			"collector": "ghcr.io/tidalscale/tidal-collector:0.1.0",
			"decider":   "ghcr.io/tidalscale/tidal-decider:0.1.0",
			"actuator":  "ghcr.io/tidalscale/tidal-actuator:0.1.0",
		},
	},
}

func TestLint(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			out, err := helm(t, sc.release.args("lint")...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint output lacks \"0 chart(s) failed\":\n%s", out)
			}
			// --strict already fails on warnings; errors must not slip
			// through as text either.
			for _, bad := range []string{"[WARNING]", "[ERROR]"} {
				if strings.Contains(out, bad) {
					t.Errorf("helm lint reports %s:\n%s", bad, out)
				}
			}
		})
	}
}

// typed converts a rendered object to its Go type, refusing fields the type
// does not have (a typo in a template).
func typed[T any](t testing.TB, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return out
}

func TestTemplate(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			m := manifest(render(t, sc.release))
			for _, o := range m {
				// Only the Roles granting broker Secrets live where those
				// are, and Knative's autoscaler Service and the Roles on its
				// ConfigMaps in Knative's namespace.
				knativeService := sc.knativeNS != "" && o.GetKind() == "Service" && o.GetName() == "autoscaler" && o.GetNamespace() == sc.knativeNS
				knativeConfig := sc.knativeNS != "" && isKnativeConfigRBAC(o) && o.GetNamespace() == sc.knativeNS
				if ns := o.GetNamespace(); ns != "" && ns != sc.release.namespace && !strings.HasSuffix(o.GetName(), "-collector-brokers") && !knativeService && !knativeConfig {
					t.Errorf("%s %s: namespace %q, want the release's %q", o.GetKind(), o.GetName(), ns, sc.release.namespace)
				}
				if got := o.GetLabels()["app.kubernetes.io/instance"]; got != sc.release.name {
					t.Errorf("%s %s: instance label %q, want %q", o.GetKind(), o.GetName(), got, sc.release.name)
				}
			}
			for _, c := range components {
				t.Run(c, func(t *testing.T) { checkComponent(t, m, sc, c) })
			}
			checkConfig(t, m, sc)
			checkRBAC(t, m, sc)
			checkNetworkPolicies(t, m, sc)
			checkKnative(t, m, knativeWant{release: sc.release, fullname: sc.fullname, namespace: sc.knativeNS, createService: sc.knativeNS != "", port: 8080})
			if got := m.find("ServiceMonitor", sc.fullname) != nil; got != sc.serviceMonitor {
				t.Errorf("ServiceMonitor rendered = %v, want %v", got, sc.serviceMonitor)
			}
			if sc.serviceMonitor {
				checkServiceMonitor(t, m, sc)
			}
		})
	}
}

func checkComponent(t *testing.T, m manifest, sc scenario, c string) {
	name := sc.fullname + "-" + c
	dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", name))
	if got, want := int64(*dep.Spec.Replicas), sc.replicas[c]; got != want {
		t.Errorf("replicas = %d, want %d", got, want)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Fatalf("selector %s does not match the pod labels %v", sel, pod.Labels)
	}
	if got := pod.Labels["app.kubernetes.io/component"]; got != c {
		t.Errorf("component label = %q, want %q", got, c)
	}
	spec := pod.Spec
	if got, want := spec.ServiceAccountName, sc.serviceAccounts[c]; got != want {
		t.Errorf("serviceAccountName = %q, want %q", got, want)
	}
	if sc.createAccounts {
		m.get(t, "ServiceAccount", spec.ServiceAccountName)
	} else if m.find("ServiceAccount", spec.ServiceAccountName) != nil {
		t.Errorf("ServiceAccount %s rendered although serviceAccount.create is false", spec.ServiceAccountName)
	}
	// Only the services that call the Kubernetes API get a token.
	if got, want := *spec.AutomountServiceAccountToken, c != "decider"; got != want {
		t.Errorf("automountServiceAccountToken = %v, want %v", got, want)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", psc)
	}
	if spec.Affinity == nil || (spec.Affinity.PodAntiAffinity == nil && spec.Affinity.NodeAffinity == nil && spec.Affinity.PodAffinity == nil) {
		t.Errorf("affinity = %+v, want one", spec.Affinity)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	ctr := spec.Containers[0]
	if got, want := ctr.Image, sc.images[c]; got != want {
		t.Errorf("image = %q, want %q", got, want)
	}
	csc := ctr.SecurityContext
	switch {
	case csc == nil:
		t.Errorf("container has no securityContext")
	case csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
		t.Errorf("readOnlyRootFilesystem not true")
	case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
		t.Errorf("allowPrivilegeEscalation not false")
	case csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL"):
		t.Errorf("capabilities %+v: want ALL dropped", csc.Capabilities)
	}
	if ctr.Resources.Requests.Cpu().IsZero() || ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", ctr.Resources)
	}
	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, probe := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", ctr.ReadinessProbe, "/readyz"}, {"liveness", ctr.LivenessProbe, "/healthz"}} {
		if probe.probe == nil || probe.probe.HTTPGet == nil {
			t.Errorf("%s probe = %+v, want an HTTP GET", probe.name, probe.probe)
			continue
		}
		if got := probe.probe.HTTPGet; got.Path != probe.path || got.Port.String() != "http" {
			t.Errorf("%s probe GET %s on port %s, want %s on port http", probe.name, got.Path, got.Port.String(), probe.path)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
	}
	if got, want := env["TIDAL_GRPC_ADDR"].Value, ":"+itoa(ports["grpc"]); got != want {
		t.Errorf("TIDAL_GRPC_ADDR = %q, want %q (the grpc container port)", got, want)
	}
	if got, want := env["TIDAL_HTTP_ADDR"].Value, ":"+itoa(ports["http"]); got != want {
		t.Errorf("TIDAL_HTTP_ADDR = %q, want %q (the http container port)", got, want)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range ctr.VolumeMounts {
		mounts[vm.Name] = vm
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for n := range mounts {
		if _, ok := volumes[n]; !ok {
			t.Errorf("volume mount %s has no volume", n)
		}
	}
	if sc.tlsSecrets != nil {
		tlsMount, ok := mounts["tls"]
		if !ok || volumes["tls"].Secret == nil {
			t.Fatalf("mTLS on: want the Secret mounted; mounts %v volumes %v", mounts, volumes)
		}
		if got, want := volumes["tls"].Secret.SecretName, sc.tlsSecrets[c]; got != want {
			t.Errorf("TLS Secret %q, want the service's own %q", got, want)
		}
		for key, file := range map[string]string{"TIDAL_TLS_CERT_FILE": "tls.crt", "TIDAL_TLS_KEY_FILE": "tls.key", "TIDAL_TLS_CA_FILE": "ca.crt"} {
			if got, want := env[key].Value, tlsMount.MountPath+"/"+file; got != want {
				t.Errorf("%s = %q, want %q", key, got, want)
			}
		}
		// Identities are pinned, not host names: deciders and actuator
		// replicas are dialled by pod IP.
		if _, ok := env["TIDAL_TLS_SERVER_NAME"]; ok {
			t.Errorf("TIDAL_TLS_SERVER_NAME set; peers are checked by identity")
		}
	} else {
		for k := range env {
			if strings.HasPrefix(k, "TIDAL_TLS_") || strings.HasPrefix(k, "TIDAL_AUTHZ_") {
				t.Errorf("%s set with mTLS off", k)
			}
		}
		if _, ok := mounts["tls"]; ok {
			t.Errorf("tls volume mounted with mTLS off")
		}
	}
	for k, want := range sc.env {
		if got := env[k].Value; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	_, annotated := pod.Annotations["prometheus.io/scrape"]
	if annotated != sc.scrapeAnnots {
		t.Errorf("prometheus.io/scrape annotation present = %v, want %v", annotated, sc.scrapeAnnots)
	}
	if annotated && pod.Annotations["prometheus.io/port"] != itoa(ports["http"]) {
		t.Errorf("prometheus.io/port = %q, want the http port %d", pod.Annotations["prometheus.io/port"], ports["http"])
	}

	switch c {
	case "collector":
		if dns := env["TIDAL_DECIDER_DNS"].Value; dns != "" {
			want := sc.fullname + "-decider." + sc.release.namespace + ".svc:" + itoa(deciderPort(t, m, sc))
			if dns != want {
				t.Errorf("TIDAL_DECIDER_DNS = %q, want %q (the headless decider Service, its grpc port)", dns, want)
			}
			if _, both := env["TIDAL_DECIDER_SERVICE"]; both {
				t.Errorf("both TIDAL_DECIDER_DNS and TIDAL_DECIDER_SERVICE set: the collector refuses that")
			}
		} else {
			want := sc.release.namespace + "/" + sc.fullname + "-decider:" + itoa(deciderPort(t, m, sc))
			if got := env["TIDAL_DECIDER_SERVICE"].Value; got != want {
				t.Errorf("TIDAL_DECIDER_SERVICE = %q, want %q (the decider Service, its grpc port)", got, want)
			}
		}
		if got, want := env["TIDAL_LEASE_NAMESPACE"].Value, sc.release.namespace; got != want {
			t.Errorf("TIDAL_LEASE_NAMESPACE = %q, want the release namespace %q (where its Role lets it write Leases)", got, want)
		}
		if ip := env["POD_IP"].ValueFrom; ip == nil || ip.FieldRef == nil || ip.FieldRef.FieldPath != "status.podIP" {
			t.Errorf("POD_IP = %+v, want the pod's IP: the collector names itself by it in its Leases", env["POD_IP"])
		}
	case "actuator":
		if got, want := env["TIDAL_SCALER"].Value, "kubernetes"; got != want {
			t.Errorf("TIDAL_SCALER = %q, want %q", got, want)
		}
		want := cmp.Or(sc.statusInterval, "3s")
		if got := env["TIDAL_STATUS_INTERVAL"].Value; got != want {
			t.Errorf("TIDAL_STATUS_INTERVAL = %q, want %q", got, want)
		}
		reads := sc.liveReads
		if reads == nil {
			reads = []string{"5", "10", "1", "3"}
		}
		for i, name := range []string{"TIDAL_LIVE_READ_RATE", "TIDAL_LIVE_READ_BURST", "TIDAL_LIVE_READ_NAMESPACE_RATE", "TIDAL_LIVE_READ_NAMESPACE_BURST"} {
			if got := env[name].Value; got != reads[i] {
				t.Errorf("%s = %q, want %q", name, got, reads[i])
			}
		}
		checkConfigMounts(t, m, "actuator", env, mounts, volumes, pod)
	case "decider":
		want := sc.fullname + "-actuator." + sc.release.namespace + ".svc:9003"
		if got := env["TIDAL_ACTUATOR_ADDR"].Value; got != want {
			t.Errorf("TIDAL_ACTUATOR_ADDR = %q, want %q", got, want)
		}
		checkConfigMounts(t, m, "decider", env, mounts, volumes, pod)
	}

	svc := typed[corev1.Service](t, m.get(t, "Service", name))
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("Service selector %v does not match the pods", svc.Spec.Selector)
	}
	if headless := svc.Spec.ClusterIP == corev1.ClusterIPNone; headless != (c == "decider") {
		t.Errorf("Service clusterIP %q: want headless only for the decider", svc.Spec.ClusterIP)
	}
	for _, p := range svc.Spec.Ports {
		if got, ok := ports[p.TargetPort.String()]; !ok || got != p.Port {
			t.Errorf("Service port %s %d → %s: want a container port of that name and number", p.Name, p.Port, p.TargetPort.String())
		}
	}

	pdbObj := m.find("PodDisruptionBudget", name)
	if got := pdbObj != nil; got != sc.pdb[c] {
		t.Fatalf("PodDisruptionBudget rendered = %v, want %v", got, sc.pdb[c])
	}
	if pdbObj != nil {
		pdb := typed[policyv1.PodDisruptionBudget](t, pdbObj)
		ps, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !ps.Matches(labels.Set(pod.Labels)) {
			t.Errorf("PodDisruptionBudget selector %v does not match the pods (%v)", pdb.Spec.Selector, err)
		}
		if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget: want exactly one of minAvailable and maxUnavailable")
		}
	}
}

func deciderPort(t *testing.T, m manifest, sc scenario) int32 {
	dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", sc.fullname+"-decider"))
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "grpc" {
			return p.ContainerPort
		}
	}
	t.Fatal("decider has no grpc port")
	return 0
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

// checkConfig proves the ConfigMap carries every config-autoscaler key the
// decider knows and that the decider accepts them; with default values the
// result is exactly Knative's defaults.
// checkConfigMounts proves a service reads Knative's config from the chart's
// ConfigMaps, mounted where its TIDAL_CONFIG_* variables point, and that its
// pods roll when the config changes.
func checkConfigMounts(t *testing.T, m manifest, c string, env map[string]corev1.EnvVar, mounts map[string]corev1.VolumeMount, volumes map[string]corev1.Volume, pod corev1.PodTemplateSpec) {
	t.Helper()
	for key, vol := range map[string]string{"TIDAL_CONFIG_AUTOSCALER": "config-autoscaler", "TIDAL_CONFIG_DEPLOYMENT": "config-deployment"} {
		if got, want := env[key].Value, mounts[vol].MountPath; got != want || want == "" {
			t.Errorf("%s %s = %q, want the mount path of volume %s %q", c, key, got, vol, want)
		}
		cm := volumes[vol].ConfigMap
		if cm == nil {
			t.Errorf("%s volume %s is not a ConfigMap", c, vol)
			continue
		}
		m.get(t, "ConfigMap", cm.Name)
	}
	if _, ok := pod.Annotations["checksum/config"]; !ok {
		t.Errorf("%s pods lack checksum/config: a config change would not roll them", c)
	}
}

func checkConfig(t *testing.T, m manifest, sc scenario) {
	cm := typed[corev1.ConfigMap](t, m.get(t, "ConfigMap", sc.fullname+"-config-autoscaler"))
	got, err := kpaconfig.ParseConfig(cm.Data)
	if err != nil {
		t.Fatalf("config-autoscaler: the decider refuses it: %v", err)
	}
	for _, key := range autoscalerKeys {
		if _, ok := cm.Data[key]; !ok {
			t.Errorf("config-autoscaler lacks key %s", key)
		}
	}
	for key := range cm.Data {
		if !slices.Contains(autoscalerKeys, key) {
			t.Errorf("config-autoscaler has key %s, which the decider does not read", key)
		}
	}
	dcm := typed[corev1.ConfigMap](t, m.get(t, "ConfigMap", sc.fullname+"-config-deployment"))
	dgot, err := kpaconfig.ParseDeploymentConfig(dcm.Data)
	if err != nil {
		t.Fatalf("config-deployment: the decider refuses it: %v", err)
	}
	if sc.name != "defaults" {
		return
	}
	if want := kpaconfig.Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("default config-autoscaler parses to\n%+v\nwant Knative's defaults\n%+v", got, want)
	}
	if want := kpaconfig.DefaultDeployment(); !reflect.DeepEqual(dgot, want) {
		t.Errorf("default config-deployment parses to %+v, want %+v", dgot, want)
	}
}

// autoscalerKeys are every config-autoscaler key the decider reads.
var autoscalerKeys = []string{
	kpaconfig.KeyContainerConcurrencyTargetPercentage, kpaconfig.KeyContainerConcurrencyTargetDefault,
	kpaconfig.KeyRPSTargetDefault, kpaconfig.KeyTargetBurstCapacity, kpaconfig.KeyStableWindow,
	kpaconfig.KeyPanicWindowPercentage, kpaconfig.KeyPanicThresholdPercentage, kpaconfig.KeyMaxScaleUpRate,
	kpaconfig.KeyMaxScaleDownRate, kpaconfig.KeyEnableScaleToZero, kpaconfig.KeyScaleToZeroGracePeriod,
	kpaconfig.KeyScaleToZeroPodRetentionPeriod, kpaconfig.KeyScaleDownDelay, kpaconfig.KeyActivatorCapacity,
	kpaconfig.KeyInitialScale, kpaconfig.KeyAllowZeroInitialScale, kpaconfig.KeyMinScale, kpaconfig.KeyMaxScale,
	kpaconfig.KeyMaxScaleLimit, kpaconfig.KeyPodAutoscalerClass, kpaconfig.KeyKeepAlive,
}

// checkRBAC checks the bindings point at the rendered roles and the pods'
// accounts; what the roles allow is proven against the API server in
// rbac_test.go.
func checkRBAC(t *testing.T, m manifest, sc scenario) {
	roles := append(m.ofKind("Role"), m.ofKind("ClusterRole")...)
	bindings := append(m.ofKind("RoleBinding"), m.ofKind("ClusterRoleBinding")...)
	if !sc.rbac {
		if len(roles)+len(bindings) != 0 {
			t.Errorf("rbac.create false but %d roles and %d bindings rendered", len(roles), len(bindings))
		}
		return
	}
	bound := map[string]bool{}
	for _, o := range bindings {
		b := typed[rbacv1.RoleBinding](t, o) // a ClusterRoleBinding has the same fields
		m.get(t, b.RoleRef.Kind, b.RoleRef.Name)
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Namespace != sc.release.namespace {
			t.Errorf("%s %s subjects %+v: want one ServiceAccount of the release namespace", o.GetKind(), o.GetName(), b.Subjects)
			continue
		}
		if o.GetAnnotations()["helm.sh/hook"] != "" {
			// The certificate Job's, while it runs (TestGeneratedCertificates).
			if b.Subjects[0].Name != sc.fullname+"-certificates" {
				t.Errorf("hook %s %s binds %s, want only the certificate Job's account", o.GetKind(), o.GetName(), b.Subjects[0].Name)
			}
			continue
		}
		bound[b.Subjects[0].Name] = true
	}
	wantBound := map[string]bool{sc.serviceAccounts["collector"]: true, sc.serviceAccounts["actuator"]: true}
	if !maps.Equal(bound, wantBound) {
		t.Errorf("bound accounts %v, want %v (the decider calls no Kubernetes API)", bound, wantBound)
	}
	for _, o := range roles {
		r := typed[rbacv1.ClusterRole](t, o)
		for _, rule := range r.Rules {
			for _, s := range append(append(rule.Verbs, rule.Resources...), rule.APIGroups...) {
				if s == "*" {
					t.Errorf("%s %s has a wildcard rule %+v", o.GetKind(), o.GetName(), rule)
				}
			}
		}
	}
}

func checkNetworkPolicies(t *testing.T, m manifest, sc scenario) {
	nps := m.ofKind("NetworkPolicy")
	if !sc.networkPolicy {
		if len(nps) != 0 {
			t.Errorf("%d NetworkPolicies rendered, want none", len(nps))
		}
		return
	}
	podLabels := map[string]labels.Set{}
	for _, c := range components {
		dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", sc.fullname+"-"+c))
		podLabels[c] = dep.Spec.Template.Labels
	}
	// admitted reports which components a policy lets in on a named port.
	admitted := func(np *networkingv1.NetworkPolicy, port string) []string {
		var out []string
		for _, rule := range np.Spec.Ingress {
			onPort := false
			for _, p := range rule.Ports {
				onPort = onPort || p.Port.String() == port
			}
			if !onPort {
				continue
			}
			for _, from := range rule.From {
				if from.PodSelector == nil || from.NamespaceSelector != nil {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(from.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range components {
					if sel.Matches(podLabels[c]) {
						out = append(out, c)
					}
				}
			}
		}
		return out
	}
	// Collectors and actuators also admit their own replicas, which
	// forward to the owner of a target.
	want := map[string][]string{"collector": {"collector"}, "decider": {"collector"}, "actuator": {"decider", "actuator"}}
	for _, c := range components {
		np := typed[networkingv1.NetworkPolicy](t, m.get(t, "NetworkPolicy", sc.fullname+"-"+c))
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(podLabels[c]) {
			t.Errorf("NetworkPolicy %s does not select the %s pods", np.Name, c)
		}
		for _, other := range components {
			if other != c && sel.Matches(podLabels[other]) {
				t.Errorf("NetworkPolicy %s also selects the %s pods", np.Name, other)
			}
		}
		if got := admitted(np, "grpc"); !slices.Equal(got, want[c]) {
			t.Errorf("NetworkPolicy %s admits %v on grpc, want %v", np.Name, got, want[c])
		}
		scrapes := false
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port.String() == "http" && len(rule.From) > 0 {
					scrapes = true
				}
				if p.Port == nil {
					t.Errorf("NetworkPolicy %s has a rule for every port", np.Name)
				}
			}
		}
		if !scrapes {
			t.Errorf("NetworkPolicy %s admits no scraper on the http port", np.Name)
		}
		wantActivators := c == "collector" && sc.knativeNS != ""
		checkActivatorIngress(t, np, sc.knativeNS, wantActivators)
	}
}

// checkServiceMonitor checks the ServiceMonitor selects exactly the three
// Services in the release namespace and scrapes their metrics port. (The
// test cluster serves no monitoring.coreos.com, so this is the check it
// gets besides helm lint.)
func checkServiceMonitor(t *testing.T, m manifest, sc scenario) {
	sm := m.get(t, "ServiceMonitor", sc.fullname)
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %s, want monitoring.coreos.com/v1", sm.GetAPIVersion())
	}
	var spec struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Scheme        string `json:"scheme"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	}
	raw, _, _ := unstructured.NestedMap(sm.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(raw, &spec, true); err != nil {
		t.Fatalf("ServiceMonitor spec: %v", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var selected []string
	for _, o := range m.ofKind("Service") {
		if sel.Matches(labels.Set(o.GetLabels())) {
			selected = append(selected, o.GetName())
			svc := typed[corev1.Service](t, o)
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" }) {
				t.Errorf("Service %s has no port named http to scrape", o.GetName())
			}
		}
	}
	if len(selected) != len(components) {
		t.Errorf("ServiceMonitor selects Services %v, want the three of the release", selected)
	}
	if !slices.Equal(spec.NamespaceSelector.MatchNames, []string{sc.release.namespace}) {
		t.Errorf("ServiceMonitor namespaces %v, want [%s]", spec.NamespaceSelector.MatchNames, sc.release.namespace)
	}
	if len(spec.Endpoints) != 1 || spec.Endpoints[0].Port != "http" || spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want the http port's /metrics", spec.Endpoints)
	}
}
