package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netheader "knative.dev/networking/pkg/http/header"
	"knative.dev/serving/pkg/activator"

	"github.com/tidalscale/tidal/test/netns"
	"github.com/tidalscale/tidal/test/testkit"
)

// podTrafficPort is where the simulated pods take requests (their
// queue-proxy's serving port), given in the mirrored private Endpoints for
// the pods' http port: not Knative's 8012, which the activator binary holds
// on every address of its network namespace.
const podTrafficPort = 18012

// withPodTraffic makes the scene's simulated pods answer requests: a
// queue-proxy probe (K-Network-Probe: queue, which Knative's activator sends
// before it routes to a pod) with 200 "queue", any other request with 200
// and the pod's name.
func withPodTraffic(s *scene) {
	s.trafficPort = podTrafficPort
	s.traffic = func(pod string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(netheader.ProbeKey) == "queue" {
				_, _ = io.WriteString(w, "queue")
				return
			}
			_, _ = io.WriteString(w, pod)
		})
	}
}

// realActivator is Knative's activator binary running for a scene.
type realActivator struct {
	*knProcess
	ns     *netns.Namespace
	client *http.Client // requests to the activator's :8012 in its namespace
	// autoscaler is where its websocket to the autoscaler's Service is
	// relayed: tidal's collector's activator endpoint, or Knative's
	// autoscaler's stats server (coldstart_test.go).
	autoscaler atomic.Pointer[string]
}

// activatorHTTP is the activator's HTTP/1 port (knative.dev/networking
// BackendHTTPPort), on every address of its namespace.
const activatorHTTP = "127.0.0.1:8012"

// startActivator runs Knative's activator binary for s, as its Deployment
// (config/core/deployments/activator.yaml) runs it: POD_NAME, POD_IP (the
// first activator-service address, so its throttler finds itself among the
// public Endpoints as when it is in the path), the admin kubeconfig. It runs
// in a network namespace of its own, where the test's relays (test/netns)
// give it what a cluster would: the API server at its own address; the
// autoscaler's Service name (resolved by a private /etc/hosts) to tidal's
// collector's activator endpoint on 127.0.0.1:8080, the port Knative fixes;
// and the pods' mirrored addresses (198.18.B.C, on its loopback) to the
// simulated pods at their real loopback IPs. It stops when t ends; the
// scene's front hands activator probes to it from then on.
func startActivator(t *testing.T, s *scene) *realActivator {
	t.Helper()
	ns := apiNamespace(t, s.c)
	// The mirrored pod range on the namespace's loopback: every address in
	// it is local there, so one wildcard listener takes them all.
	ip, err := ns.Command("ip", "addr", "add", "198.18.0.1/15", "dev", "lo")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ip.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(ip.Args, " "), err, out)
	}
	podNet, err := netip.ParsePrefix(s.c.PodCIDR)
	if err != nil {
		t.Fatalf("cluster pod CIDR %q: %v", s.c.PodCIDR, err)
	}
	hi := podNet.Addr().As4()
	if err := ns.Forward(fmt.Sprintf("0.0.0.0:%d", podTrafficPort), func(local net.Addr) string {
		a, ok := local.(*net.TCPAddr)
		if !ok || a.IP.To4() == nil || a.IP.To4()[0] != 198 {
			return ""
		}
		v4 := a.IP.To4()
		return net.JoinHostPort(fmt.Sprintf("%d.%d.%d.%d", hi[0], hi[1], v4[2], v4[3]), fmt.Sprint(podTrafficPort))
	}); err != nil {
		t.Fatal(err)
	}
	a := &realActivator{ns: ns}
	a.autoscaler.Store(&s.wsAddr)
	if err := ns.Forward("127.0.0.1:8080", func(net.Addr) string { return *a.autoscaler.Load() }); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "knative-activator")
	withHosts(t, s.knBins.Activator, wrapper, map[string]string{"autoscaler." + systemNamespace + ".svc.cluster.local": "127.0.0.1"})
	var cmd *exec.Cmd
	if cmd, err = ns.Command(wrapper, "--kubeconfig", s.c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	a.knProcess = startKnative(t, "activator", cmd, "POD_NAME=activator-binary", "POD_IP="+activatorIPs[0])
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return ns.DialContext(ctx, "tcp", activatorHTTP)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	a.client = &http.Client{Transport: tr}
	// Ready as its kubelet probe sees it: 200 once its websocket to the
	// autoscaler (tidal's collector) is up.
	testkit.Eventually(t, 60*time.Second, "Knative's activator Ready (its websocket to tidal's collector up)", func() bool {
		a.running(t)
		req, _ := http.NewRequest(http.MethodGet, "http://activator/healthz", nil)
		req.Header.Set("User-Agent", "kube-probe/1.37")
		resp, err := a.client.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string { return a.logTail(30) })
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: "activator"})
	proxy.Transport = tr
	s.front.useActivator(proxy)
	return a
}

// request sends one request for s's revision to the activator, as the
// ingress does while the ServerlessService puts it in the path, and
// returns the status and body.
func (a *realActivator) request(ctx context.Context, s *scene) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.publicRev+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set(activator.RevisionHeaderNamespace, s.ns)
	req.Header.Set(activator.RevisionHeaderName, s.rev)
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// logSize is the length of the activator's log now, for waitNoBackends.
func (a *realActivator) logSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(a.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// waitNoBackends waits until the activator's throttler, in what it logged
// after offset from, has dropped the last backend of s's revision. The
// public Endpoints move to the activator before its own informer sees the
// revision's private Endpoints empty: a request sent in between is proxied
// to a pod that is going away, not held at zero.
func (a *realActivator) waitNoBackends(t *testing.T, s *scene, from int64) {
	t.Helper()
	key := fmt.Sprintf(`"knative.dev/key":%q`, s.ns+"/"+s.rev)
	backends := regexp.MustCompile(`backends(?: =|:) (\d+)`)
	last := ""
	testkit.Eventually(t, 30*time.Second, "Knative's activator without a backend for the revision", func() bool {
		b, err := os.ReadFile(a.logPath)
		if err != nil || int64(len(b)) < from {
			return false
		}
		for _, line := range strings.Split(string(b[from:]), "\n") {
			if m := backends.FindStringSubmatch(line); m != nil && strings.Contains(line, key) {
				last = m[1]
			}
		}
		return last == "0"
	}, func() string { return fmt.Sprintf("last backends %q\n%s", last, a.logTail(30)) })
}

// TestKnativeActivatorBinary runs Knative's activator binary in the request
// path beside Knative's controller and tidal in Knative mode, at Knative's
// default target-burst-capacity (200: the activator stays in the path while
// pods run), 0 (only at zero) and -1 (always): requests through it reach the
// revision's pods; the ServerlessService's mode follows the burst capacity;
// and from zero, a request held by the activator brings the revision back
// through the activator's own stat over its websocket to tidal's collector
// (nothing else reports demand at zero) and is answered by the new pod.
func TestKnativeActivatorBinary(t *testing.T) {
	for _, tc := range []struct {
		tbc  string
		mode netv1alpha1.ServerlessServiceOperationMode // while a pod runs
	}{
		{"200", netv1alpha1.SKSOperationModeProxy},
		{"0", netv1alpha1.SKSOperationModeServe},
		{"-1", netv1alpha1.SKSOperationModeProxy},
	} {
		inPath := tc.mode == netv1alpha1.SKSOperationModeProxy
		t.Run("target-burst-capacity="+tc.tbc, func(t *testing.T) {
			s := startScene(t, withPodTraffic)
			act := startActivator(t, s)
			who := "tidal, target-burst-capacity " + tc.tbc
			s.createService(t, map[string]string{"autoscaling.knative.dev/target-burst-capacity": tc.tbc})
			s.waitRevisionReady(t)
			s.waitTidalPA(t)
			ctx := context.Background()

			// A steady load the pods report keeps one pod.
			s.rate.Set(5)
			var code int
			var body string
			var rerr error
			testkit.Eventually(t, 30*time.Second, "a request through Knative's activator answered by a pod", func() bool {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				code, body, rerr = act.request(rctx, s)
				return rerr == nil && code == http.StatusOK && strings.HasPrefix(body, s.rev+"-deployment-")
			}, func() string { return fmt.Sprintf("last answer %d %q (%v)\n%s", code, body, rerr, act.logTail(30)) })
			mode := func() string {
				sks, err := s.nc.NetworkingV1alpha1().ServerlessServices(s.ns).Get(ctx, s.rev, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				return string(sks.Spec.Mode)
			}
			testkit.Eventually(t, 30*time.Second, fmt.Sprintf("%s: ServerlessService in %s mode with a pod running", who, tc.mode),
				func() bool { return mode() == string(tc.mode) }, func() string { return "mode " + mode() })

			logFrom := act.logSize(t)
			if inPath {
				// The activator is in the path already: as Knative's KPA,
				// no grace period to wait for it, zero after the stable
				// window.
				s.rate.Set(0)
				idleFrom := time.Now()
				s.reps.waitSpec(t, s.kc, 0, 90*time.Second, who+": scale to zero")
				if idle := time.Since(idleFrom); idle < stableWindow-time.Second {
					t.Errorf("%s: zero %s after the load stopped, want at least the stable window (%s)", who, idle, stableWindow)
				}
				if m := mode(); m != string(netv1alpha1.SKSOperationModeProxy) {
					t.Errorf("%s: ServerlessService mode %q at zero, want Proxy", who, m)
				}
			} else {
				s.scaleToZero(t, who)
			}
			act.waitNoBackends(t, s, logFrom)

			// From zero: the activator holds the request until a pod is
			// Ready, and only its stat tells tidal there is demand.
			recorded := `tidal_collector_activator_stats_total{outcome="recorded"}`
			recordedBefore := collectorMetric(t, s.tidal.Collectors[0], recorded)
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			wg.Go(func() { code, body, rerr = act.request(rctx, s) })
			s.reps.waitSpec(t, s.kc, 1, 30*time.Second, who+": back from zero")
			wg.Wait()
			if rerr != nil || code != http.StatusOK || !strings.HasPrefix(body, s.rev+"-deployment-") {
				t.Fatalf("%s: the request held at zero was answered %d %q (%v), want 200 from a pod", who, code, body, rerr)
			}
			if got := collectorMetric(t, s.tidal.Collectors[0], recorded); got <= recordedBefore {
				t.Errorf("%s: the collector recorded %v activator stats, %v before the request: Knative's activator did not reach it", who, got, recordedBefore)
			}
		})
	}
}
