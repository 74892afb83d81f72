package chart_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/tidalscale/tidal/actuator/knative"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/apis/knative/knativetest"
	knnetworking "github.com/tidalscale/tidal/apis/knative/networking/v1alpha1"
	"github.com/tidalscale/tidal/knativeconfig"
	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

var (
	knativePAsGVR = knautoscaling.Resource
	knativeSKSGVR = knnetworking.Resource
)

// ruleTriples expands what a rules review returned into
// group/resource[/name]:verb keys, as triples does for policy rules.
func ruleTriples(rules []authorizationv1.ResourceRule) map[string]bool {
	policy := make([]rbacv1.PolicyRule, len(rules))
	for i, r := range rules {
		policy[i] = rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames, Verbs: r.Verbs}
	}
	return triples(policy)
}

// knativeRBACFixture is a release installed with Knative mode off, then
// applied again with it on (as helm upgrade would), its autoscaler Service
// in a namespace of its own instead of knative-serving, so tests never
// share one; and the rules each account had before and after.
type knativeRBACFixture struct {
	c *cluster.Cluster
	// ns is the release's namespace, wns the workloads', kns Knative's.
	ns, wns, kns        string
	collector, actuator *account
	// before and after map an account and a namespace to its rules.
	before, after map[string]map[string]map[string]bool
}

func newKnativeRBACFixture(t *testing.T) *knativeRBACFixture {
	t.Helper()
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := knativetest.InstallCRDs(ctx, c); err != nil {
		t.Fatal(err)
	}
	f := &knativeRBACFixture{c: c, ns: c.Namespace(t), wns: c.Namespace(t), kns: c.Namespace(t)}
	r := release{name: "r" + f.ns[strings.LastIndex(f.ns, "-")+1:], namespace: f.ns, set: []string{"knative.namespace=" + f.kns}}
	acc, clusterScoped, err := rel.InstallAccounts(ctx, c, r.opts(), time.Hour)
	t.Cleanup(func() { deleteAll(t, c, clusterScoped) })
	if err != nil {
		t.Fatal(err)
	}
	f.collector = newAccount(t, acc.ByComponent["collector"])
	f.actuator = newAccount(t, acc.ByComponent["actuator"])
	// The authorizer sees bindings through its informers: wait for the
	// last rule each install adds before reading the rules.
	f.waitFor(t, f.actuator, "update", "apps", "deployments", "scale")
	f.waitFor(t, f.collector, "list", "", "pods", "")
	f.before = f.rulesNow(t)
	r.set = append(r.set, "knative.enabled=true")
	_, upgraded, _, err := rel.Install(ctx, c.Config(), r.opts(), false)
	t.Cleanup(func() { deleteAll(t, c, upgraded) })
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, f.actuator, "create", "networking.internal.knative.dev", "serverlessservices", "")
	f.waitFor(t, f.collector, "watch", knautoscaling.SchemeGroupVersion.Group, "podautoscalers", "")
	f.after = f.rulesNow(t)
	return f
}

// waitFor waits until a may do verb on the resource in the workload
// namespace.
func (f *knativeRBACFixture) waitFor(t *testing.T, a *account, verb, group, resource, sub string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("%s allowed to %s %s.%s/%s after the install", a.name, verb, resource, group, sub),
		func() bool { return a.can(t, verb, group, resource, sub, f.wns, "") })
}

func (f *knativeRBACFixture) rulesNow(t *testing.T) map[string]map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]map[string]bool{}
	for name, a := range map[string]*account{"collector": f.collector, "actuator": f.actuator} {
		out[name] = map[string]map[string]bool{}
		for _, ns := range []string{f.ns, f.wns, f.kns} {
			out[name][ns] = ruleTriples(a.rules(t, ns))
		}
	}
	return out
}

// TestKnativeRBAC proves on the API server what knative.enabled adds to the
// chart's accounts, as every binding folds in (SelfSubjectRulesReview):
// exactly knative.Rules() for the actuator and list and watch of Knative's
// PodAutoscalers for the collector, in every namespace, and nothing taken
// away. Then, under each account's own token, the calls Knative mode makes
// succeed (the informers sync; the reconciler reads a PodAutoscaler, writes
// its status, creates and updates its ServerlessService with an owner
// reference that blocks deletion), and the writes it never makes are
// refused.
func TestKnativeRBAC(t *testing.T) {
	f := newKnativeRBACFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("added exactly", func(t *testing.T) {
		want := map[string]map[string]bool{"actuator": triples(knative.Rules()), "collector": collectorKnativeTriples()}
		// In Knative's namespace both also follow its three ConfigMaps.
		inKnative := map[string]map[string]bool{}
		for who, w := range want {
			inKnative[who] = maps.Clone(w)
			maps.Copy(inKnative[who], triples(knativeconfig.Rules()))
		}
		for _, who := range []string{"collector", "actuator"} {
			for ns, after := range f.after[who] {
				want := want
				if ns == f.kns {
					want = inKnative
				}
				before := f.before[who][ns]
				added, removed := map[string]bool{}, map[string]bool{}
				for k := range after {
					if !before[k] {
						added[k] = true
					}
				}
				for k := range before {
					if !after[k] {
						removed[k] = true
					}
				}
				if !maps.Equal(added, want[who]) {
					t.Errorf("%s in %s: knative.enabled added %v, want %v", who, ns, slices.Sorted(maps.Keys(added)), slices.Sorted(maps.Keys(want[who])))
				}
				if len(removed) > 0 {
					t.Errorf("%s in %s: knative.enabled took away %v", who, ns, slices.Sorted(maps.Keys(removed)))
				}
			}
		}
	})

	admin, err := knclient.New(f.c.Config())
	if err != nil {
		t.Fatal(err)
	}
	actuatorKn, err := knclient.New(f.actuator.config)
	if err != nil {
		t.Fatal(err)
	}
	collectorKn, err := knclient.New(f.collector.config)
	if err != nil {
		t.Fatal(err)
	}
	// A PodAutoscaler as Knative's revision reconciler makes it.
	revLabels := map[string]string{knautoscaling.LabelRevision: "hello"}
	pa := &knautoscaling.PodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: f.wns, Labels: revLabels},
		Spec: knautoscaling.PodAutoscalerSpec{
			ScaleTargetRef: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "hello-deployment"},
			ProtocolType:   knautoscaling.ProtocolHTTP1,
		},
	}
	if pa, err = admin.PodAutoscalers(f.wns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("sufficient", func(t *testing.T) {
		// knativeconfig's informers: each ConfigMap listed and watched by
		// name in Knative's namespace.
		for _, a := range []*account{f.collector, f.actuator} {
			for _, name := range knativeconfig.Names {
				for _, verb := range []string{"get", "list", "watch"} {
					if !a.can(t, verb, "", "configmaps", "", f.kns, name) {
						t.Errorf("%s may not %s configmap %s in Knative's namespace", a.name, verb, name)
					}
				}
			}
		}
		// actuator/knative's informers and collector/targets' Knative
		// informer, over every namespace.
		syncInformers(t, f.actuator, knativePAsGVR, knativeSKSGVR, podsGVR)
		syncInformers(t, f.collector, knativePAsGVR, podsGVR)
		// The reconciler's status write, at the resourceVersion it read.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := actuatorKn.PodAutoscalers(f.wns).Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				return err
			}
			one := int32(1)
			got.Status.DesiredScale = &one
			got.Status.Annotations = map[string]string{knative.AnnotationDecision: `{"sequence":1,"desiredScale":1}`}
			_, err = actuatorKn.PodAutoscalers(f.wns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
			return err
		})
		mustAllow(t, "actuator: update knative podautoscaler status", err)
		// Its ServerlessService, controlled by the PodAutoscaler (as
		// desiredSKS makes it: blockOwnerDeletion needs update on
		// podautoscalers/finalizers where OwnerReferencesPermissionEnforcement
		// is on, which the review below asks for).
		sks := &knnetworking.ServerlessService{
			ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: f.wns, Labels: revLabels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pa, knautoscaling.Kind)}},
			Spec: knnetworking.ServerlessServiceSpec{Mode: knnetworking.ModeProxy, ObjectRef: pa.Spec.ScaleTargetRef, ProtocolType: "http1", NumActivators: 2},
		}
		sks, err = actuatorKn.ServerlessServices(f.wns).Create(ctx, sks, metav1.CreateOptions{})
		mustAllow(t, "actuator: create serverlessservice", err)
		if err == nil {
			sks.Spec.Mode = knnetworking.ModeServe
			_, err = actuatorKn.ServerlessServices(f.wns).Update(ctx, sks, metav1.UpdateOptions{})
			mustAllow(t, "actuator: update serverlessservice", err)
		}
		if !f.actuator.can(t, "update", knautoscaling.SchemeGroupVersion.Group, "podautoscalers", "finalizers", f.wns, "hello") {
			t.Errorf("actuator may not update podautoscalers/finalizers: owner references blocking deletion would be refused where OwnerReferencesPermissionEnforcement is on")
		}
		// Events on the PodAutoscaler, as the recorder writes them.
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "hello.created", Namespace: f.wns},
			InvolvedObject: corev1.ObjectReference{APIVersion: knautoscaling.SchemeGroupVersion.String(), Kind: "PodAutoscaler", Namespace: f.wns, Name: "hello"},
			Reason:         knative.EventCreated, Message: "created ServerlessService", Type: corev1.EventTypeNormal, Count: 1,
			Source: corev1.EventSource{Component: "tidal-actuator"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
		}
		_, err = f.actuator.kube.CoreV1().Events(f.wns).Create(ctx, ev, metav1.CreateOptions{})
		mustAllow(t, "actuator: create event on a knative podautoscaler", err)
	})

	t.Run("not more", func(t *testing.T) {
		// The collector only reads Knative's objects.
		_, err := collectorKn.PodAutoscalers(f.wns).Get(ctx, "hello", metav1.GetOptions{})
		mustForbid(t, "collector: get a knative podautoscaler (it lists and watches)", err)
		got, err := admin.PodAutoscalers(f.wns).Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = collectorKn.PodAutoscalers(f.wns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		mustForbid(t, "collector: update knative podautoscaler status", err)
		_, err = collectorKn.ServerlessServices(f.wns).List(ctx, metav1.ListOptions{})
		mustForbid(t, "collector: list serverlessservices", err)
		_, err = collectorKn.ServerlessServices(f.wns).Create(ctx, &knnetworking.ServerlessService{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		mustForbid(t, "collector: create serverlessservice", err)

		// The actuator writes PodAutoscalers' status alone (their spec and
		// metadata are Knative's revision reconciler's), never creates or
		// deletes them, and never deletes or patches a ServerlessService
		// (the garbage collector removes it with its PodAutoscaler).
		got.Labels = map[string]string{"x": "y"}
		_, err = actuatorKn.PodAutoscalers(f.wns).Update(ctx, got, metav1.UpdateOptions{})
		mustForbid(t, "actuator: update a knative podautoscaler's spec or metadata", err)
		_, err = actuatorKn.PodAutoscalers(f.wns).Create(ctx, &knautoscaling.PodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		mustForbid(t, "actuator: create a knative podautoscaler", err)
		mustForbid(t, "actuator: delete a knative podautoscaler", actuatorKn.PodAutoscalers(f.wns).Delete(ctx, "hello", metav1.DeleteOptions{}))
		mustForbid(t, "actuator: delete a serverlessservice", actuatorKn.ServerlessServices(f.wns).Delete(ctx, "hello", metav1.DeleteOptions{}))
		_, err = f.actuator.dyn.Resource(knativeSKSGVR).Namespace(f.wns).Patch(ctx, "hello", types.MergePatchType, []byte(`{"spec":{"mode":"Proxy"}}`), metav1.PatchOptions{})
		mustForbid(t, "actuator: patch a serverlessservice", err)
		_, err = f.actuator.dyn.Resource(knativeSKSGVR).Namespace(f.wns).Patch(ctx, "hello", types.MergePatchType, []byte(`{"status":{"serviceName":"x"}}`), metav1.PatchOptions{}, "status")
		mustForbid(t, "actuator: write a serverlessservice's status (Knative's controller's)", err)
		// Nothing of Knative's public API or its configuration but the
		// three ConfigMaps it reads.
		for _, r := range []struct{ verb, group, resource, ns, name string }{
			{"get", "serving.knative.dev", "revisions", f.wns, ""},
			{"update", "serving.knative.dev", "services", f.wns, ""},
			{"get", "", "configmaps", f.kns, ""},
			{"list", "", "configmaps", f.kns, ""},
			{"get", "", "configmaps", f.kns, "config-logging"},
			{"update", "", "configmaps", f.kns, knativeconfig.NameAutoscaler},
			{"get", "", "configmaps", f.wns, knativeconfig.NameAutoscaler},
			{"create", "", "services", f.kns, ""},
			{"update", "", "services", f.kns, ""},
		} {
			for _, a := range []*account{f.collector, f.actuator} {
				if a.can(t, r.verb, r.group, r.resource, "", r.ns, r.name) {
					t.Errorf("%s may %s %s.%s %q in %s", a.name, r.verb, r.resource, r.group, r.name, r.ns)
				}
			}
		}
	})
}

// deleteAll deletes a release's cluster-scoped objects.
func deleteAll(t *testing.T, c *cluster.Cluster, objs []*unstructured.Unstructured) {
	a := newApplier(t, c)
	for _, o := range objs {
		if err := a.Delete(context.Background(), o); err != nil {
			t.Logf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// TestKnativeHelmInstall is the migration's Helm side on a real API server:
// helm install refuses to take over a Service `autoscaler` it did not make
// (Knative's own), installs once it is gone, and helm uninstall removes the
// Service from Knative's namespace with the rest of the release.
func TestKnativeHelmInstall(t *testing.T) {
	c := cluster.Shared(t)
	ns, kns := c.Namespace(t), c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := "kn" + ns[strings.LastIndex(ns, "-")+1:]
	knatives := c.Client.CoreV1().Services(kns)
	// Knative's own Service, as serving-core.yaml makes it.
	own := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "autoscaler", Labels: map[string]string{"app": "autoscaler"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "autoscaler"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := knatives.Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	install := []string{"install", name, "charts/tidal", "--namespace", ns, "--set", "knative.enabled=true", "--set", "knative.namespace=" + kns}
	out, err := rel.Helm(ctx, c.Kubeconfig, install...)
	if err == nil || !strings.Contains(err.Error(), `Service "autoscaler"`) {
		t.Fatalf("helm install over Knative's autoscaler Service: err = %v, want a refusal naming it; output:\n%.400s", err, out)
	}
	// A failed install may leave a release record behind.
	_, _ = rel.Helm(ctx, c.Kubeconfig, "uninstall", name, "--namespace", ns)
	if got, err := knatives.Get(ctx, "autoscaler", metav1.GetOptions{}); err != nil || got.Spec.Type == corev1.ServiceTypeExternalName {
		t.Fatalf("after the refused install: Knative's Service %+v, %v; want it untouched", got, err)
	}

	if err := knatives.Delete(ctx, "autoscaler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out = helmOn(t, c, install...)
	t.Cleanup(func() { _, _ = rel.Helm(context.Background(), c.Kubeconfig, "uninstall", name, "--namespace", ns) })
	for _, want := range []string{"Knative mode", "Service " + kns + "/autoscaler, port 8080", name + "-tidal-autoscaler." + ns + ".svc.cluster.local", "kubectl get podautoscalers.autoscaling.internal.knative.dev -A"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install's NOTES lack %q; output:\n%s", want, out)
		}
	}
	svc, err := knatives.Get(ctx, "autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := name + "-tidal-autoscaler." + ns + ".svc.cluster.local"; svc.Spec.Type != corev1.ServiceTypeExternalName || svc.Spec.ExternalName != want {
		t.Errorf("Service %s/autoscaler: type %s externalName %q, want ExternalName %q", kns, svc.Spec.Type, svc.Spec.ExternalName, want)
	}
	target, err := c.Client.CoreV1().Services(ns).Get(ctx, name+"-tidal-autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the ExternalName's target: %v", err)
	}
	if target.Spec.ClusterIP == "" || target.Spec.ClusterIP == corev1.ClusterIPNone || len(target.Spec.Ports) != 1 || target.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service %s: clusterIP %q ports %+v, want a virtual IP and port 8080", target.Name, target.Spec.ClusterIP, target.Spec.Ports)
	}

	helmOn(t, c, "uninstall", name, "--namespace", ns, "--wait", "--timeout", "2m")
	if _, err := knatives.Get(ctx, "autoscaler", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after uninstall: Service %s/autoscaler: err = %v, want NotFound", kns, err)
	}
	for _, comp := range []string{"collector", "actuator"} {
		if _, err := c.Client.RbacV1().ClusterRoles().Get(ctx, name+"-tidal-"+comp, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after uninstall: ClusterRole %s-tidal-%s: err = %v, want NotFound", name, comp, err)
		}
	}
}
