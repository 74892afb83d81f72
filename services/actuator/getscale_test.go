package main

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tidalscale/tidal/actuator/rbac"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// apiCounter is a proxy in front of the API server that counts the GETs of
// single objects (not lists, not watches) by path.
type apiCounter struct {
	mu   sync.Mutex
	gets map[string]int
}

func (a *apiCounter) get(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gets[path]
}

// countingKubeconfig rewrites the kubeconfig at path to reach the API
// server through a counting proxy.
func countingKubeconfig(t *testing.T, c *cluster.Cluster, path string) *apiCounter {
	t.Helper()
	rc := c.Config()
	upstream, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: rc.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	a := &apiCounter{gets: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = tr
	proxy.FlushInterval = -1 // watches stream
	// TLS, as client-go sends a bearer token over nothing else.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Get("watch") == "" {
			a.mu.Lock()
			a.gets[r.URL.Path]++
			a.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = srv.URL
		cl.CertificateAuthorityData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestGetScaleReadsNoAPI: GetScale, which any identity of the trust domain
// may call, answers Deployments and StatefulSets from the actuator's caches
// without one GET of the API server, however often it is called, and a
// missing one is NOT_FOUND without one.
func TestGetScaleReadsNoAPI(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	kubeconfig := restrictedKubeconfig(t, c, ns)
	api := countingKubeconfig(t, c, kubeconfig)
	// A live read would pass twice at most, then be refused.
	client := startActuator(t, kubeconfig, "--namespaces="+ns, "--live-read-rate=0.001", "--live-read-burst=2")
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: cluster.Deployment("db", nil, 1).Spec.Template},
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("web", nil, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// ghost and phantom name a Deployment and a StatefulSet that do not exist.
	for _, r := range []autoscalingv1alpha1.ScaleTargetRef{
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}, {APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db"},
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "ghost"}, {APIVersion: "apps/v1", Kind: "StatefulSet", Name: "phantom"},
	} {
		if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, &autoscalingv1alpha1.PodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Spec: autoscalingv1alpha1.PodAutoscalerSpec{ScaleTargetRef: r},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web := &commonv1.TargetRef{Namespace: ns, Name: "web"}
	db := &commonv1.TargetRef{Namespace: ns, Name: "db", ApiVersion: "apps/v1", Kind: "StatefulSet"}
	testkit.Eventually(t, 20*time.Second, "GetScale of the Deployment and the StatefulSet their PodAutoscalers name", func() bool {
		got, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: web})
		gotDB, errDB := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: db})
		return err == nil && got.GetReplicas() == 3 && errDB == nil && gotDB.GetReplicas() == 2
	})

	deployment := "/apis/apps/v1/namespaces/" + ns + "/deployments/web"
	before := api.get(deployment) + api.get(deployment+"/scale")
	for i := range 200 {
		if got, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: web}); err != nil || got.GetReplicas() != 3 {
			t.Fatalf("GetScale %d of the Deployment: %v, %v; want 3 replicas", i+1, got, err)
		}
	}
	if after := api.get(deployment) + api.get(deployment+"/scale"); after != before {
		t.Errorf("200 GetScale calls of a Deployment made %d GETs of it; want none (the cache answers)", after-before)
	}

	// The PodAutoscaler's own reconciles read the StatefulSet's scale live
	// (its writes read first): a window of 200 GetScale calls with no GET
	// of it comes once they settle, and never if GetScale read it live.
	statefulSet := "/apis/apps/v1/namespaces/" + ns + "/statefulsets/db"
	windows := 0
	testkit.Eventually(t, 30*time.Second, "200 GetScale calls of the StatefulSet without a GET of it", func() bool {
		windows++
		before := api.get(statefulSet) + api.get(statefulSet+"/scale")
		for i := range 200 {
			if got, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: db}); err != nil || got.GetReplicas() != 2 {
				t.Fatalf("GetScale %d of the StatefulSet: %v, %v; want 2 replicas from the cache", i+1, got, err)
			}
		}
		return api.get(statefulSet)+api.get(statefulSet+"/scale") == before
	})
	t.Logf("StatefulSet: %d windows of 200 GetScale calls until one made no GET", windows)

	// A Deployment or StatefulSet the cache does not hold is not found, not
	// read live.
	for _, r := range []*commonv1.TargetRef{
		{Namespace: ns, Name: "ghost"},
		{Namespace: ns, Name: "phantom", ApiVersion: "apps/v1", Kind: "StatefulSet"},
	} {
		path := "/apis/apps/v1/namespaces/" + ns + "/deployments/ghost"
		if r.GetKind() == "StatefulSet" {
			path = statefulSet[:len(statefulSet)-len("db")] + "phantom"
		}
		testkit.Eventually(t, 20*time.Second, "GetScale of the missing "+r.Key()+" its PodAutoscaler names to be NOT_FOUND", func() bool {
			_, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: r})
			return status.Code(err) == codes.NotFound
		})
		before = api.get(path) + api.get(path+"/scale")
		for range 50 {
			if _, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: r}); status.Code(err) != codes.NotFound {
				t.Fatalf("GetScale of the missing %s: %v, want NOT_FOUND", r.Key(), err)
			}
		}
		// The PodAutoscaler of the missing StatefulSet looks for it again
		// every --target-retry (1s), live, so only the Deployment's GETs
		// are counted; for both, a live read would have been refused
		// after two (--live-read-burst), not NOT_FOUND.
		if after := api.get(path) + api.get(path+"/scale"); r.GetKind() == "" && after != before {
			t.Errorf("50 GetScale calls of the missing %s made %d GETs of it; want none", r.Key(), after-before)
		}
	}
}

// TestGetScaleLiveReadShares: GetScale of a kind no cache holds (a custom
// resource with /scale) reads it live, each caller's reads about one
// namespace within their own share (--live-read-namespace-rate) before the
// budget of all callers (--live-read-rate): a caller flooding one tenant's
// namespace is refused there and leaves the other tenants their reads.
func TestGetScaleLiveReadShares(t *testing.T) {
	c := cluster.Shared(t)
	ctx := context.Background()
	crds, err := filepath.Abs("../../actuator/scale/testdata")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.InstallCRDs(ctx, crds); err != nil {
		t.Fatal(err)
	}
	tenants := []string{c.Namespace(t), c.Namespace(t), c.Namespace(t)}
	kubeconfig := restrictedKubeconfig(t, c, tenants[0], rbac.Extra("test.tidal.dev", "scalables"))
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(c.Config())
	scalables := schema.GroupVersionResource{Group: "test.tidal.dev", Version: "v1", Resource: "scalables"}
	for _, ns := range tenants {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "test.tidal.dev/v1", "kind": "Scalable",
			"metadata": map[string]any{"name": "s"},
			"spec":     map[string]any{"replicas": int64(3)},
		}}
		if _, err := dyn.Resource(scalables).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, &autoscalingv1alpha1.PodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Spec:       autoscalingv1alpha1.PodAutoscalerSpec{ScaleTargetRef: autoscalingv1alpha1.ScaleTargetRef{APIVersion: "test.tidal.dev/v1", Kind: "Scalable", Name: "s"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Ready means its caches hold the PodAutoscalers: no read below waits
	// for them, and none refills (a token in 1,000 s).
	client := startActuator(t, kubeconfig, "--namespaces="+strings.Join(tenants, ","),
		"--scale-kinds=apps/Deployment,test.tidal.dev/Scalable",
		"--live-read-rate=0.001", "--live-read-burst=5",
		"--live-read-namespace-rate=0.001", "--live-read-namespace-burst=2")
	reads := func(ns string, n int) (passed int, refusals []string) {
		for range n {
			got, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: "s", ApiVersion: "test.tidal.dev/v1", Kind: "Scalable"}})
			switch {
			case err == nil && got.GetReplicas() == 3:
				passed++
			case status.Code(err) == codes.ResourceExhausted:
				refusals = append(refusals, err.Error())
			default:
				t.Fatalf("GetScale of %s/s: %v, %v; want 3 replicas or RESOURCE_EXHAUSTED", ns, got, err)
			}
		}
		return passed, refusals
	}
	wantRefused := func(what string, refusals []string, flag string) {
		t.Helper()
		for _, r := range refusals {
			if !strings.Contains(r, flag) {
				t.Errorf("%s: refused with %q, want it to name %s", what, r, flag)
				return
			}
		}
	}

	// The first tenant's flood: its share, 2, passes; the rest is refused
	// without spending the budget of all callers.
	passed, refusals := reads(tenants[0], 20)
	t.Logf("20 reads about %s: %d passed, %d refused", tenants[0], passed, len(refusals))
	if passed != 2 || len(refusals) != 18 {
		t.Errorf("20 reads about %s: %d passed, %d refused; want its share of 2 passed", tenants[0], passed, len(refusals))
	}
	wantRefused("the flood of "+tenants[0], refusals, "--live-read-namespace-rate")
	// The second tenant still has its share.
	if passed, refusals := reads(tenants[1], 2); passed != 2 {
		t.Errorf("reads about %s after %s's flood: %d of 2 passed (refused: %q); want both", tenants[1], tenants[0], passed, refusals)
	}
	// The third gets what is left of the budget of all callers (5 - 4),
	// then refusals naming it.
	passed, refusals = reads(tenants[2], 2)
	if passed != 1 || len(refusals) != 1 {
		t.Errorf("reads about %s: %d passed, %d refused; want 1 passed, then the budget of all callers spent", tenants[2], passed, len(refusals))
	}
	wantRefused("the last read about "+tenants[2], refusals, "--live-read-rate")
}
