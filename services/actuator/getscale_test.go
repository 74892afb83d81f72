package main

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

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
// may call, answers a Deployment from the actuator's cache without one GET
// of the API server, however often it is called; a kind the actuator does
// not cache (a StatefulSet) is read live, at most --live-read-rate times a
// second for all callers, the rest RESOURCE_EXHAUSTED naming the flag.
func TestGetScaleReadsNoAPI(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	kubeconfig := restrictedKubeconfig(t, c, ns)
	api := countingKubeconfig(t, c, kubeconfig)
	client := startActuator(t, kubeconfig, "--namespaces="+ns, "--live-read-rate=0.001", "--live-read-burst=2")
	tidal, err := tidalclient.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: cluster.Deployment("db", nil, 1).Spec.Template},
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, cluster.Deployment("web", nil, 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// ghost names a Deployment that does not exist.
	for _, r := range []autoscalingv1alpha1.ScaleTargetRef{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}, {APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db"}, {APIVersion: "apps/v1", Kind: "Deployment", Name: "ghost"}} {
		if _, err := tidal.AutoscalingV1alpha1().PodAutoscalers(ns).Create(ctx, &autoscalingv1alpha1.PodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Spec: autoscalingv1alpha1.PodAutoscalerSpec{ScaleTargetRef: r},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web := &commonv1.TargetRef{Namespace: ns, Name: "web"}
	testkit.Eventually(t, 20*time.Second, "GetScale of the Deployment its PodAutoscaler names", func() bool {
		got, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: web})
		return err == nil && got.GetReplicas() == 3
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
	// A Deployment the cache does not hold is not found, not read live.
	ghost := "/apis/apps/v1/namespaces/" + ns + "/deployments/ghost"
	testkit.Eventually(t, 20*time.Second, "GetScale of the missing Deployment its PodAutoscaler names to be NOT_FOUND", func() bool {
		_, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: "ghost"}})
		return status.Code(err) == codes.NotFound
	})
	before = api.get(ghost) + api.get(ghost+"/scale")
	for range 50 {
		if _, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: &commonv1.TargetRef{Namespace: ns, Name: "ghost"}}); status.Code(err) != codes.NotFound {
			t.Fatalf("GetScale of a missing Deployment: %v, want NOT_FOUND", err)
		}
	}
	if after := api.get(ghost) + api.get(ghost+"/scale"); after != before {
		t.Errorf("50 GetScale calls of a missing Deployment made %d GETs of it; want none", after-before)
	}

	db := &commonv1.TargetRef{Namespace: ns, Name: "db", ApiVersion: "apps/v1", Kind: "StatefulSet"}
	passed, refused := 0, 0
	for range 20 {
		_, err := client.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: db})
		switch {
		case err == nil:
			passed++
		case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "--live-read-rate"):
			refused++
		default:
			t.Fatalf("GetScale of the StatefulSet: %v, want OK or RESOURCE_EXHAUSTED naming --live-read-rate", err)
		}
	}
	// The PodAutoscaler's own reconciles read the StatefulSet too, so
	// its GETs are logged, not counted against GetScale.
	statefulSet := "/apis/apps/v1/namespaces/" + ns + "/statefulsets/db"
	t.Logf("20 GetScale calls of a StatefulSet: %d passed, %d refused; %d live GETs of it since the actuator started", passed, refused, api.get(statefulSet)+api.get(statefulSet+"/scale"))
	if passed < 1 || passed > 2 || refused != 20-passed {
		t.Errorf("GetScale of a StatefulSet: %d passed, %d refused; want the burst of 2 at most passed, the rest refused", passed, refused)
	}
}
