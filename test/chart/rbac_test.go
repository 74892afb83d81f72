package chart_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/scale"
	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/cluster"
)

var (
	podsGVR           = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	deploymentsGVR    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	statefulSetsGVR   = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	podAutoscalersGVR = schema.GroupVersionResource{Group: "autoscaling.tidal.dev", Version: "v1alpha1", Resource: "podautoscalers"}
	metricsGVR        = schema.GroupVersionResource{Group: "autoscaling.tidal.dev", Version: "v1alpha1", Resource: "metrics"}
	functionsGVR      = schema.GroupVersionResource{Group: "functions.tidal.dev", Version: "v1alpha1", Resource: "functions"}
	topicsGVR         = schema.GroupVersionResource{Group: "functions.tidal.dev", Version: "v1alpha1", Resource: "topics"}
)

// rbacFixture is a release installed with the default values plus the
// Secrets it grants, a workload namespace with a target to scale, and each
// service account's token.
type rbacFixture struct {
	c *cluster.Cluster
	// ns is the release's namespace; wns holds the workloads.
	ns, wns string
	// release is the Helm release name (resource names start with
	// RELEASE-tidal); accounts are its ServiceAccounts.
	release  string
	accounts *rel.Accounts
	// clients of the three service accounts, authenticated by tokens from
	// the TokenRequest API, and the admin's.
	collector, decider, actuator *account
	admin                        dynamic.Interface
	// nobody is the release namespace's default ServiceAccount, bound to
	// nothing; baseRules caches its rules by namespace.
	nobody    *account
	baseRules map[string][]authorizationv1.ResourceRule
}

// account is one ServiceAccount's view of the cluster.
type account struct {
	name   string
	config *rest.Config
	kube   kubernetes.Interface
	dyn    dynamic.Interface
}

const (
	givenSecret   = "kafka-credentials" // actuator.secretNames
	brokersSecret = "kafka-brokers"     // collector.brokerSecrets
	otherSecret   = "unrelated"
)

func newRBACFixture(t *testing.T) *rbacFixture {
	t.Helper()
	c := cluster.Shared(t)
	f := &rbacFixture{c: c, ns: c.Namespace(t), wns: c.Namespace(t)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f.release = "r" + f.ns[strings.LastIndex(f.ns, "-")+1:]
	r := release{name: f.release, namespace: f.ns, set: []string{
		"actuator.secretNames[0]=" + givenSecret,
		"collector.brokerSecrets[0].namespace=" + f.wns,
		"collector.brokerSecrets[0].names[0]=" + brokersSecret,
	}}
	acc, clusterScoped, err := rel.InstallAccounts(ctx, c, r.opts(), time.Hour)
	t.Cleanup(func() {
		a := newApplier(t, c)
		for _, o := range clusterScoped {
			if err := a.Delete(context.Background(), o); err != nil {
				t.Logf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	f.accounts = acc
	for _, s := range []struct{ ns, name string }{
		{f.ns, givenSecret}, {f.ns, otherSecret}, {f.wns, brokersSecret}, {f.wns, otherSecret},
	} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.name}, StringData: map[string]string{"brokers": "127.0.0.1:9092"}}
		if _, err := c.Client.CoreV1().Secrets(s.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if f.admin, err = dynamic.NewForConfig(c.Config()); err != nil {
		t.Fatal(err)
	}
	f.collector = newAccount(t, acc.ByComponent["collector"])
	f.decider = newAccount(t, acc.ByComponent["decider"])
	f.actuator = newAccount(t, acc.ByComponent["actuator"])
	return f
}

// serviceAccount gets a token for ns/name from the TokenRequest API, as the
// kubelet does for a pod, checked by the API server.
func serviceAccount(t *testing.T, c *cluster.Cluster, ns, name string) *account {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := rel.NewAccount(ctx, c, ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return newAccount(t, a)
}

// newAccount adds clients to a.
func newAccount(t *testing.T, a *rel.Account) *account {
	t.Helper()
	out := &account{name: a.Name, config: a.Config}
	var err error
	if out.kube, err = kubernetes.NewForConfig(a.Config); err != nil {
		t.Fatal(err)
	}
	if out.dyn, err = dynamic.NewForConfig(a.Config); err != nil {
		t.Fatal(err)
	}
	return out
}

// can asks the API server whether the account may do verb on the resource.
func (a *account) can(t *testing.T, verb, group, resource, subresource, ns, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := a.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource, Subresource: subresource, Namespace: ns, Name: name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("access review: %v", err)
	}
	return r.Status.Allowed
}

// rules lists everything the account may do in ns, as the API server
// resolves it from every binding (cluster-wide ones included).
func (a *account) rules(t *testing.T, ns string) []authorizationv1.ResourceRule {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := a.kube.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("rules review: %v", err)
	}
	if r.Status.Incomplete {
		t.Fatalf("rules review in %s incomplete: %s", ns, r.Status.EvaluationError)
	}
	return r.Status.ResourceRules
}

// baseline reports whether every account has rule r in ns: the rules of
// the namespace's default ServiceAccount, which no binding names (asking
// who one is and what one may do, reading cluster trust bundles, ...).
func (f *rbacFixture) baseline(t *testing.T, ns string, r authorizationv1.ResourceRule) bool {
	t.Helper()
	if f.baseRules == nil {
		f.baseRules = map[string][]authorizationv1.ResourceRule{}
	}
	rules, ok := f.baseRules[ns]
	if !ok {
		if f.nobody == nil {
			f.nobody = serviceAccount(t, f.c, f.ns, "default")
		}
		rules = f.nobody.rules(t, ns)
		f.baseRules[ns] = rules
	}
	return slices.ContainsFunc(rules, func(b authorizationv1.ResourceRule) bool {
		return slices.Equal(b.Verbs, r.Verbs) && slices.Equal(b.APIGroups, r.APIGroups) &&
			slices.Equal(b.Resources, r.Resources) && slices.Equal(b.ResourceNames, r.ResourceNames)
	})
}

var readVerbs = []string{"get", "list", "watch"}

func readOnly(r authorizationv1.ResourceRule) bool {
	for _, v := range r.Verbs {
		if !slices.Contains(readVerbs, v) {
			return false
		}
	}
	return true
}

// syncInformers starts dynamic informers over every namespace, as the
// services do, and requires their caches to sync: each needs list and watch.
func syncInformers(t *testing.T, a *account, gvrs ...schema.GroupVersionResource) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(a.dyn, 0)
	for _, gvr := range gvrs {
		inf := factory.ForResource(gvr).Informer()
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			t.Logf("%s: informer on %s: %v", a.name, gvr.Resource, err)
		}); err != nil {
			t.Fatal(err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for gvr, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Errorf("%s: informer on %s did not sync: list or watch refused", a.name, gvr.Resource)
		}
	}
	cancel()
}

// syncNamespacedInformer is syncInformers for one namespace.
func syncNamespacedInformer(t *testing.T, a *account, ns string, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(a.dyn, 0, ns, nil)
	inf := factory.ForResource(gvr).Informer()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Errorf("%s: informer on %s in %s did not sync: list or watch refused", a.name, gvr.Resource, ns)
	}
	cancel()
}

func mustForbid(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: err = %v, want Forbidden", what, err)
	}
}

func mustAllow(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// createTarget makes a Deployment and a PodAutoscaler for it in the workload
// namespace, as a user would.
func (f *rbacFixture) createTarget(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dep := cluster.Deployment(name, nil, 1)
	if _, err := f.c.Client.AppsV1().Deployments(f.wns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pa := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling.tidal.dev/v1alpha1", "kind": "PodAutoscaler",
		"metadata": map[string]any{"name": name, "namespace": f.wns},
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
			"strategy":       "kpa",
		},
	}}
	if _, err := f.admin.Resource(podAutoscalersGVR).Namespace(f.wns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRBACSufficient runs, under each service account's own token, the
// calls its service makes (each commented with the code that makes it):
// informers over what it watches, and each write. TestServicesUnderTheirAccounts
// then runs the services themselves with these tokens.
func TestRBACSufficient(t *testing.T) {
	f := newRBACFixture(t)
	f.createTarget(t, "hello")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("collector", func(t *testing.T) {
		a := f.collector
		// collector/targets: targets and the pods to scrape, everywhere.
		syncInformers(t, a, podsGVR, podAutoscalersGVR, metricsGVR, functionsGVR)
		// Bucket ownership: shard/bucket's Lease informer and
		// client-go's LeaseLock (get, create, update) in the release
		// namespace.
		leases := a.kube.CoordinationV1().Leases(f.ns)
		holder, dur := "127.1.0.7:9001", int32(15)
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: f.release + "-tidal-collector-0-of-10"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur},
		}
		_, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		mustAllow(t, "create lease", err)
		got, err := leases.Get(ctx, lease.Name, metav1.GetOptions{})
		mustAllow(t, "get lease", err)
		if err == nil {
			next := "127.1.0.8:9001"
			got.Spec.HolderIdentity = &next
			_, err = leases.Update(ctx, got, metav1.UpdateOptions{})
			mustAllow(t, "update lease", err)
		}
		syncNamespacedInformer(t, a, f.ns, schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"})
		// The deciders behind their Service.
		_, err = a.kube.CoreV1().Services(f.ns).Get(ctx, f.release+"-tidal-decider", metav1.GetOptions{})
		mustAllow(t, "get the decider Service", err)
		// Kafka bootstrap servers from the Secret a PodAutoscaler names.
		_, err = a.kube.CoreV1().Secrets(f.wns).Get(ctx, brokersSecret, metav1.GetOptions{})
		mustAllow(t, "get the broker Secret it was given", err)
		// collector/kedascaler: the ScaledObject a KEDA call names, for
		// its trigger's metricType (no KEDA CRDs here: asked, not read).
		if !a.can(t, "get", "keda.sh", "scaledobjects", "", f.wns, "") {
			t.Error("collector may not get ScaledObjects")
		}
	})

	t.Run("actuator", func(t *testing.T) {
		a := f.actuator
		syncInformers(t, a, podsGVR, podAutoscalersGVR, metricsGVR, functionsGVR, topicsGVR, deploymentsGVR, statefulSetsGVR)

		// The actuator's own scale client, on the target's /scale.
		k, err := scale.NewKube(a.config)
		if err != nil {
			t.Fatal(err)
		}
		target := scale.Target{Namespace: f.wns, Name: "hello"}
		mustAllow(t, "scale.Kube.SetReplicas", k.SetReplicas(ctx, target, 3))
		if got, err := k.GetScale(ctx, target); err != nil || got.Replicas != 3 {
			t.Errorf("scale.Kube.GetScale = %+v, %v; want 3 replicas", got, err)
		}

		// The PodAutoscaler: decision record on the object, then status.
		pas := a.dyn.Resource(podAutoscalersGVR).Namespace(f.wns)
		pa, err := pas.Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get podautoscaler: %v", err)
		}
		pa.SetAnnotations(map[string]string{"autoscaling.tidal.dev/decision": `{"sequence":1,"desiredScale":3}`})
		pa, err = pas.Update(ctx, pa, metav1.UpdateOptions{FieldManager: scale.FieldManager})
		mustAllow(t, "update podautoscaler", err)
		if err == nil {
			if err := unstructured.SetNestedField(pa.Object, int64(3), "status", "desiredScale"); err != nil {
				t.Fatal(err)
			}
			_, err = pas.UpdateStatus(ctx, pa, metav1.UpdateOptions{FieldManager: scale.FieldManager})
			mustAllow(t, "update podautoscaler status", err)
		}

		// The PodAutoscaler's Metric: created, then updated.
		metrics := a.dyn.Resource(metricsGVR).Namespace(f.wns)
		m := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "autoscaling.tidal.dev/v1alpha1", "kind": "Metric",
			"metadata": map[string]any{"name": "hello", "namespace": f.wns},
			"spec":     map[string]any{"stableWindow": "60s", "panicWindow": "6s"},
		}}
		m, err = metrics.Create(ctx, m, metav1.CreateOptions{FieldManager: scale.FieldManager})
		mustAllow(t, "create metric", err)
		if err == nil {
			if err := unstructured.SetNestedField(m.Object, "90s", "spec", "stableWindow"); err != nil {
				t.Fatal(err)
			}
			_, err = metrics.Update(ctx, m, metav1.UpdateOptions{FieldManager: scale.FieldManager})
			mustAllow(t, "update metric", err)
			mustAllow(t, "delete metric", metrics.Delete(ctx, "hello", metav1.DeleteOptions{}))
		}

		// Events, as client-go's recorder writes them: create, then patch
		// the count of a repeat.
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "hello.scaled", Namespace: f.wns},
			InvolvedObject: corev1.ObjectReference{APIVersion: "autoscaling.tidal.dev/v1alpha1", Kind: "PodAutoscaler", Namespace: f.wns, Name: "hello"},
			Reason:         "Scaled", Message: "scaled to 3", Type: corev1.EventTypeNormal, Count: 1,
			Source:         corev1.EventSource{Component: "tidal-actuator"},
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
		}
		_, err = a.kube.CoreV1().Events(f.wns).Create(ctx, ev, metav1.CreateOptions{})
		mustAllow(t, "create event", err)
		_, err = a.kube.CoreV1().Events(f.wns).Patch(ctx, ev.Name, types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
		mustAllow(t, "patch event", err)

		// The Deployer: a Function's Deployment applied, its status
		// written, the Deployment deleted.
		fns := a.dyn.Resource(functionsGVR).Namespace(f.wns)
		fn := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "functions.tidal.dev/v1alpha1", "kind": "Function",
			"metadata": map[string]any{"name": "upper", "namespace": f.wns},
			"spec": map[string]any{
				"container": map[string]any{"name": "fn", "image": "tidal.test/upper:latest"},
				"input":     "words",
			},
		}}
		fn, err = f.admin.Resource(functionsGVR).Namespace(f.wns).Create(ctx, fn, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create function: %v", err)
		}
		if err := unstructured.SetNestedField(fn.Object, "upper", "status", "deploymentName"); err != nil {
			t.Fatal(err)
		}
		_, err = fns.UpdateStatus(ctx, fn, metav1.UpdateOptions{FieldManager: scale.FieldManager})
		mustAllow(t, "update function status", err)
		lagPA := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "autoscaling.tidal.dev/v1alpha1", "kind": "PodAutoscaler",
			"metadata": map[string]any{"name": "upper", "namespace": f.wns},
			"spec": map[string]any{
				"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "upper"},
				"strategy":       "lag",
				"lag":            map[string]any{"brokers": []any{"127.0.0.1:9092"}, "topic": "words", "consumerGroup": "upper"},
			},
		}}
		_, err = pas.Create(ctx, lagPA, metav1.CreateOptions{FieldManager: scale.FieldManager})
		mustAllow(t, "create a Function's lag podautoscaler", err)
		mustAllow(t, "delete a Function's lag podautoscaler", pas.Delete(ctx, "upper", metav1.DeleteOptions{}))
		deps := a.dyn.Resource(deploymentsGVR).Namespace(f.wns)
		body := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"upper"},"spec":{"replicas":0,
			"selector":{"matchLabels":{"function":"upper"}},"template":{"metadata":{"labels":{"function":"upper"}},
			"spec":{"containers":[{"name":"main","image":"tidal.test/upper:latest"}]}}}}`
		force := true
		_, err = deps.Patch(ctx, "upper", types.ApplyPatchType, []byte(body), metav1.PatchOptions{FieldManager: scale.FieldManager, Force: &force})
		mustAllow(t, "apply function deployment", err)
		mustAllow(t, "delete function deployment", deps.Delete(ctx, "upper", metav1.DeleteOptions{}))

		_, err = a.kube.CoreV1().Secrets(f.ns).Get(ctx, givenSecret, metav1.GetOptions{})
		mustAllow(t, "get the Secret it was given", err)
	})
}

// TestRBACNotTooMuch proves each account holds no more than its service
// needs: it enumerates what each may do (SelfSubjectRulesReview, which
// folds in every binding) and tries the writes it must not make.
func TestRBACNotTooMuch(t *testing.T) {
	f := newRBACFixture(t)
	f.createTarget(t, "hello")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	namespaces := []string{f.ns, f.wns, metav1.NamespaceDefault, metav1.NamespaceSystem}
	scaleResources := []struct{ group, resource string }{
		{"apps", "deployments"}, {"apps", "statefulsets"}, {"apps", "replicasets"},
		{"", "replicationcontrollers"}, {"autoscaling.tidal.dev", "podautoscalers"},
	}

	t.Run("decider patches no scale", func(t *testing.T) {
		a := f.decider
		for _, ns := range append(namespaces, "") {
			for _, r := range scaleResources {
				for _, verb := range []string{"patch", "update", "get"} {
					if a.can(t, verb, r.group, r.resource, "scale", ns, "") {
						t.Errorf("decider may %s %s/scale in %q", verb, r.resource, ns)
					}
				}
			}
			if ns == "" {
				continue
			}
			// It may do nothing beyond what every account may.
			for _, r := range a.rules(t, ns) {
				if !f.baseline(t, ns, r) {
					t.Errorf("decider has rule %+v in %s; want none beyond the defaults every account has", r, ns)
				}
			}
		}
		// The real call the actuator makes, with the decider's token.
		k, err := scale.NewKube(a.config)
		if err != nil {
			t.Fatal(err)
		}
		err = k.SetReplicas(ctx, scale.Target{Namespace: f.wns, Name: "hello"}, 5)
		mustForbid(t, "decider: scale.Kube.SetReplicas", err)
		_, err = a.kube.AppsV1().Deployments(f.wns).Patch(ctx, "hello", types.MergePatchType,
			[]byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{}, "scale")
		mustForbid(t, "decider: patch deployments/scale", err)
	})

	t.Run("collector writes only its Leases", func(t *testing.T) {
		a := f.collector
		for _, ns := range namespaces {
			for _, r := range a.rules(t, ns) {
				switch {
				case f.baseline(t, ns, r), readOnly(r) && !slices.Contains(r.Resources, "secrets"):
				case ns == f.ns && slices.Equal(r.APIGroups, []string{"coordination.k8s.io"}) && slices.Equal(r.Resources, []string{"leases"}):
				case ns == f.ns && slices.Equal(r.Resources, []string{"services"}) && slices.Equal(r.ResourceNames, []string{f.release + "-tidal-decider"}):
				case ns == f.wns && slices.Equal(r.Resources, []string{"secrets"}) && slices.Equal(r.ResourceNames, []string{brokersSecret}) && slices.Equal(r.Verbs, []string{"get"}):
				default:
					t.Errorf("collector has rule %+v in %s", r, ns)
				}
			}
		}
		for _, ns := range []string{f.wns, metav1.NamespaceDefault, "kube-node-lease"} {
			if a.can(t, "create", "coordination.k8s.io", "leases", "", ns, "") {
				t.Errorf("collector may create Leases in %s", ns)
			}
		}
		// Real writes it must not make.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
		_, err := a.kube.CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{})
		mustForbid(t, "collector: create configmap", err)
		_, err = a.kube.AppsV1().Deployments(f.wns).Patch(ctx, "hello", types.MergePatchType,
			[]byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{}, "scale")
		mustForbid(t, "collector: patch deployments/scale", err)
		_, err = a.dyn.Resource(podAutoscalersGVR).Namespace(f.wns).Patch(ctx, "hello", types.MergePatchType,
			[]byte(`{"status":{"desiredScale":5}}`), metav1.PatchOptions{}, "status")
		mustForbid(t, "collector: patch podautoscaler status", err)
		err = a.kube.CoreV1().Pods(f.wns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		mustForbid(t, "collector: delete pods", err)
		_, err = a.kube.CoreV1().Events(f.wns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "x"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: f.wns, Name: "x"},
		}, metav1.CreateOptions{})
		mustForbid(t, "collector: create event", err)
		_, err = a.kube.CoordinationV1().Leases(f.wns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		mustForbid(t, "collector: create lease outside the release namespace", err)
		_, err = a.kube.CoreV1().Secrets(f.wns).Get(ctx, otherSecret, metav1.GetOptions{})
		mustForbid(t, "collector: get a Secret it was not given", err)
		_, err = a.kube.CoreV1().Secrets(f.wns).List(ctx, metav1.ListOptions{})
		mustForbid(t, "collector: list secrets", err)
		_, err = a.kube.CoreV1().Services(f.ns).Get(ctx, f.release+"-tidal-actuator", metav1.GetOptions{})
		mustForbid(t, "collector: get a Service other than the deciders'", err)
	})

	t.Run("actuator writes StatefulSets only through their scale", func(t *testing.T) {
		a := f.actuator
		for _, ns := range append(namespaces, "") {
			for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
				if a.can(t, verb, "apps", "statefulsets", "", ns, "") {
					t.Errorf("actuator may %s StatefulSets in %q; it reads them (list, watch) for GetScale and writes only statefulsets/scale", verb, ns)
				}
			}
		}
	})

	t.Run("actuator reads no Secret it was not given", func(t *testing.T) {
		a := f.actuator
		for _, ns := range append(namespaces, "") {
			for _, verb := range readVerbs {
				if a.can(t, verb, "", "secrets", "", ns, "") {
					t.Errorf("actuator may %s every Secret in %q", verb, ns)
				}
			}
			if ns == "" {
				continue
			}
			if a.can(t, "get", "", "secrets", "", ns, otherSecret) {
				t.Errorf("actuator may get Secret %s/%s", ns, otherSecret)
			}
			for _, r := range a.rules(t, ns) {
				if !slices.Contains(r.Resources, "secrets") && !slices.Contains(r.Resources, "*") {
					continue
				}
				if ns != f.ns || !slices.Equal(r.ResourceNames, []string{givenSecret}) || !slices.Equal(r.Verbs, []string{"get"}) {
					t.Errorf("actuator has Secret rule %+v in %s; want only get on %s in %s", r, ns, givenSecret, f.ns)
				}
			}
		}
		if !a.can(t, "get", "", "secrets", "", f.ns, givenSecret) {
			t.Errorf("actuator may not get the Secret %s it was given", givenSecret)
		}
		_, err := a.kube.CoreV1().Secrets(f.ns).Get(ctx, otherSecret, metav1.GetOptions{})
		mustForbid(t, "actuator: get a Secret it was not given", err)
		_, err = a.kube.CoreV1().Secrets(f.ns).List(ctx, metav1.ListOptions{})
		mustForbid(t, "actuator: list secrets", err)
		_, err = a.kube.CoreV1().Secrets(f.wns).Get(ctx, brokersSecret, metav1.GetOptions{})
		mustForbid(t, "actuator: get the collector's broker Secret", err)
		// Nor does it change what the chart did not ask for.
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: f.ns, Name: a.name}},
		}
		_, err = a.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		mustForbid(t, "actuator: create a ClusterRoleBinding", err)
		_, err = a.kube.CoreV1().ConfigMaps(f.wns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		mustForbid(t, "actuator: create a ConfigMap", err)
	})
}

// TestRBACOptions checks what the RBAC values change, on the all-options
// release: without the Deployer the actuator writes no Deployment; it may
// scale the extra resource; the collector reads exactly the broker Secrets
// listed, in their namespaces.
func TestRBACOptions(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ensureNamespace(t, c, "team-a")
	ensureNamespace(t, c, "team-b")
	r := release{name: "opts", namespace: ns, valuesFiles: []string{"test/chart/testdata/all-options.yaml"}}
	// all-options.yaml fixes the full name; a second release in this
	// cluster would collide on the ClusterRoles, so give this one its own.
	r.set = []string{"fullnameOverride=opts-" + ns[strings.LastIndex(ns, "-")+1:]}
	objs, _ := install(t, c, r, false)
	saOf := func(component string) string {
		dep := typed[appsv1.Deployment](t, objs.get(t, "Deployment", r.set[0][len("fullnameOverride="):]+"-"+component))
		return dep.Spec.Template.Spec.ServiceAccountName
	}
	actuator := serviceAccount(t, c, ns, saOf("actuator"))
	collector := serviceAccount(t, c, ns, saOf("collector"))
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		if actuator.can(t, verb, "apps", "deployments", "", "team-a", "") {
			t.Errorf("actuator.deployer.enabled=false: actuator may %s Deployments", verb)
		}
	}
	if !actuator.can(t, "get", "apps", "deployments", "", "team-a", "") {
		t.Errorf("actuator may not read Deployments")
	}
	if !actuator.can(t, "update", "widgets.example.com", "widgets", "scale", "team-a", "w") {
		t.Errorf("actuator may not scale the extra scale resource widgets.example.com/widgets")
	}
	if actuator.can(t, "update", "widgets.example.com", "gadgets", "scale", "team-a", "w") {
		t.Errorf("actuator may scale widgets.example.com/gadgets, which no value lists")
	}
	if !actuator.can(t, "get", "", "secrets", "", ns, "kafka-credentials") || actuator.can(t, "get", "", "secrets", "", ns, "other") {
		t.Errorf("actuator.secretNames: want get on kafka-credentials only")
	}
	for _, s := range []struct {
		ns, name string
		want     bool
	}{
		{"team-a", "kafka-brokers", true}, {"team-a", "kafka-brokers-dr", true}, {"team-b", "kafka", true},
		{"team-a", "kafka", false}, {"team-b", "kafka-brokers", false}, {ns, "kafka-brokers", false},
	} {
		if got := collector.can(t, "get", "", "secrets", "", s.ns, s.name); got != s.want {
			t.Errorf("collector may get Secret %s/%s = %v, want %v", s.ns, s.name, got, s.want)
		}
	}
	if collector.can(t, "list", "", "secrets", "", "team-a", "") {
		t.Errorf("collector may list Secrets in team-a")
	}
}

// TestExtraScaleResourcesScaleKinds: a custom resource the chart lets the
// actuator scale (RBAC on its /scale, TestRBACOptions) is also one its
// --scale-kinds admits, after the binary's default kinds; without any, the
// chart leaves the flag at its default.
func TestExtraScaleResourcesScaleKinds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    release
		want string // "" means not set
	}{
		{"none", release{name: "tidal", namespace: "tidal-system"}, ""},
		{"all options", release{name: "prod", namespace: "autoscaling", valuesFiles: []string{"test/chart/testdata/all-options.yaml"}},
			scale.DefaultKinds + ",widgets.example.com/Widget"},
		{"core group", release{name: "tidal", namespace: "tidal-system", set: []string{
			"actuator.extraScaleResources[0].resource=replicationcontrollers",
			"actuator.extraScaleResources[0].kind=ReplicationController"}},
			scale.DefaultKinds + ",core/ReplicationController"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := manifest(render(t, tt.r))
			var dep *appsv1.Deployment
			for _, o := range m {
				if o.GetKind() == "Deployment" && strings.HasSuffix(o.GetName(), "-actuator") {
					dep = typed[appsv1.Deployment](t, o)
				}
			}
			if dep == nil {
				t.Fatal("no actuator Deployment")
			}
			got := ""
			for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "TIDAL_SCALE_KINDS" {
					got = e.Value
				}
			}
			if got != tt.want {
				t.Fatalf("TIDAL_SCALE_KINDS = %q, want %q", got, tt.want)
			}
			if got != "" {
				if err := new(scale.Kinds).Set(got); err != nil {
					t.Errorf("--scale-kinds refuses %q: %v", got, err)
				}
			}
		})
	}
}
