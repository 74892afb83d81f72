package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tidalscale/tidal/test/testkit"
)

// dirPrefix names every cluster's directory under os.TempDir().
const dirPrefix = "tidal-cluster-"

// NodeName is the one fake node kwok runs every pod on.
const NodeName = "kwok-node-0"

// podNetSlots is how many clusters can run side by side on one machine: each
// takes one /16 of loopback for its pod IPs, 127.16.0.0/16 to 127.31.0.0/16
// (podNet), so simulated pod endpoints of two clusters never bind the same
// address.
const podNetSlots = 16

// podNetFirst is the second octet of slot 0's pod range. All of 127.0.0.0/8
// is loopback on Linux; starting at 127.16 keeps every slot clear of
// 127.0.0.0/16, where the control plane and the services listen (127.0.0.1).
const podNetFirst = 16

// PodNet is the loopback range that holds every slot's pod range.
const PodNet = "127.16.0.0/12"

// podCapacity is the fake node's pod capacity: a /16 holds 65,534 addresses,
// and kwok hands out one per pod, so this is all the node can use.
const podCapacity = "65534"

// podNet is the pod range of a slot: a /16, 65,534 pod IPs, enough for the
// scale test's 10,000 targets with up to five pods each.
func podNet(slot int) string { return fmt.Sprintf("127.%d.0.0/16", podNetFirst+slot) }

// Options configure Start. The zero value is what tests want.
type Options struct {
	// CRDDirs are directories of CustomResourceDefinition manifests to
	// install. Nil means charts/tidal/crds of the checkout; an empty non-nil
	// slice installs none.
	CRDDirs []string
	// Log receives progress (binary builds, start-up). Nil means os.Stderr.
	Log io.Writer
	// ComponentTimeout bounds how long each component may take to come up.
	// Zero means 60 s.
	ComponentTimeout time.Duration
	// HPASyncPeriod is how often kube-controller-manager's HPA controller
	// syncs every HorizontalPodAutoscaler; zero means Kubernetes' 15 s.
	HPASyncPeriod time.Duration
	// AuditPolicy, when set, is an audit.k8s.io/v1 Policy (YAML) the API
	// server applies, writing JSON events to Cluster.AuditLog as it
	// answers each request (blocking mode: the batch backend drops events
	// when the API server is starved).
	AuditPolicy string
	// Controllers, when set, are the only controllers
	// kube-controller-manager runs (its names, as --controllers takes
	// them); nil means all that are on by default. Each one that watches
	// pods costs CPU per pod event, which at ten thousand targets starves
	// the machine.
	Controllers []string
	// PodReadyDelay, when above 0, is how long after kwok gives a pod its
	// IP it marks it Ready, in a second status write; 0 does both in one.
	// A real pod gets its address before its containers start and pass
	// their readiness probe, and a simulated endpoint that serves each
	// address as it appears is then serving before a client told the pod
	// is Ready calls it.
	PodReadyDelay time.Duration
	// PodStageWorkers, when above 0, is how many pod status writes kwok
	// makes at once (its podPlayStageParallelism, 4 by default). Each
	// waits for the API server, so on a busy one four cap how fast pods
	// get their address and turn Ready.
	PodStageWorkers int
	// Profiling serves the API server's /debug/pprof to its admin
	// (kube-apiserver's --profiling), for a CPU profile of the API server
	// under a load.
	Profiling bool
	// Nice, when above 0, runs every component at that nice value, so
	// the processes a test measures on the same cores (in production on
	// machines of their own) take CPU before the control plane does.
	Nice int
}

// Cluster is a running control plane: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, all on loopback.
type Cluster struct {
	// Dir holds the cluster's data, keys, kubeconfig and component logs; Stop
	// deletes it.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig for kubectl and for
	// processes started by tests.
	Kubeconfig string
	// PodCIDR is the range kwok gives pod IPs from: a /16 inside PodNet
	// (127.16.0.0/12), one per cluster running on the machine.
	PodCIDR string
	// Client is an admin clientset.
	Client kubernetes.Interface
	// AuditLog is the API server's audit log; empty without
	// Options.AuditPolicy.
	AuditLog string

	config    *rest.Config
	nice      int    // Options.Nice
	slot      func() // releases the pod network slot
	stopOnce  sync.Once
	startedAt time.Time

	// mu guards procs and stopped: Stop may run (from a signal handler)
	// while Start is still starting components.
	mu      sync.Mutex
	procs   []*process
	atStop  []func()
	stopped bool
}

// live holds every cluster started and not yet stopped, so an interrupted
// test binary can stop clusters that are still starting (stopAll).
var live struct {
	sync.Mutex
	clusters map[*Cluster]bool
}

func stopAll() {
	live.Lock()
	cs := make([]*Cluster, 0, len(live.clusters))
	for c := range live.clusters {
		cs = append(cs, c)
	}
	live.Unlock()
	for _, c := range cs {
		c.Stop()
	}
}

// Config returns a copy of the admin REST config (token auth, the cluster's
// CA), safe for the caller to modify.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Start builds the control plane if the cache lacks it (see EnsureBinaries),
// starts it on free loopback ports, waits until the fake node is Ready and the
// controllers work, and installs the CRDs. If a component does not come up in
// time the error carries the last lines of its log. The caller must Stop the
// cluster; on error Start has already cleaned up.
//
// Ports are picked free and handed to the components, so another process on
// the machine can take one in between; a start that fails is therefore tried
// again on fresh ports, up to startAttempts times in all.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	log := opts.Log
	if log == nil {
		log = os.Stderr
	}
	// A failed build is not worth retrying; build (or find) the binaries once.
	if _, err := EnsureBinaries(ctx, log); err != nil {
		return nil, err
	}
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var c *Cluster
		c, err = startOnce(ctx, opts)
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		fmt.Fprintf(log, "test/cluster: start attempt %d of %d failed: %v\n", attempt, startAttempts, err)
	}
	return nil, err
}

// startAttempts bounds Start's tries.
const startAttempts = 3

func startOnce(ctx context.Context, opts Options) (_ *Cluster, err error) {
	log := opts.Log
	if log == nil {
		log = os.Stderr
	}
	timeout := opts.ComponentTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	bins, err := EnsureBinaries(ctx, log)
	if err != nil {
		return nil, err
	}
	crdDirs := opts.CRDDirs
	if crdDirs == nil {
		root, err := repoRoot()
		if err != nil {
			return nil, err
		}
		crdDirs = []string{filepath.Join(root, "charts", "tidal", "crds")}
	}

	reapStale(os.TempDir())
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("cluster directory: %w", err)
	}
	c := &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), startedAt: time.Now(), nice: opts.Nice}
	live.Lock()
	if live.clusters == nil {
		live.clusters = map[*Cluster]bool{}
	}
	live.clusters[c] = true
	live.Unlock()
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("cluster directory: %w", err)
	}
	slot, release, err := takePodNetSlot(ctx)
	if err != nil {
		return nil, err
	}
	c.slot = release
	c.PodCIDR = podNet(slot)

	keys, err := newPKI(dir)
	if err != nil {
		return nil, err
	}
	ports, err := testkit.FreePorts(6)
	if err != nil {
		return nil, err
	}
	etcdPort, etcdPeerPort, apiPort, cmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]

	// etcd
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeerPort)
	etcd, err := c.start(dir, "etcd", bins.Kube, "etcd",
		"--name=tidal",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=tidal="+peerURL,
		"--unsafe-no-fsync", // the data dies with the cluster
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := waitHTTP(ctx, plain, etcd, etcdURL+"/health", "", timeout); err != nil {
		return nil, err
	}

	// kube-apiserver
	apiURL := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	var audit []string
	if opts.AuditPolicy != "" {
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(opts.AuditPolicy), 0o644); err != nil {
			return nil, fmt.Errorf("audit policy: %w", err)
		}
		c.AuditLog = filepath.Join(dir, "audit.log")
		// Blocking, not batch: the batch backend drops events once its
		// buffer fills, which a starved API server reached at 10,000
		// targets (the log held 22 of tidal's 59 writes a second). One
		// file, never rotated (the default rotates at 100 MB, which a
		// 10,000-target run reached before its steady phase): AuditLog
		// holds the whole run.
		audit = []string{"--audit-policy-file=" + policy, "--audit-log-path=" + c.AuditLog, "--audit-log-format=json",
			"--audit-log-mode=blocking", "--audit-log-maxsize=1048576"}
	}
	apiserver, err := c.start(dir, "kube-apiserver", bins.Kube, append([]string{"kube-apiserver",
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + keys.servingCert, "--tls-private-key-file=" + keys.servingKey,
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		"--token-auth-file=" + keys.tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + keys.saPub,
		"--service-account-signing-key-file=" + keys.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// API aggregation (an APIService such as KEDA's external metrics):
		// the front proxy's identity, and the Service's endpoint dialled
		// directly, as no kube-proxy routes its cluster IP.
		"--proxy-client-cert-file=" + keys.proxyCert, "--proxy-client-key-file=" + keys.proxyKey,
		"--requestheader-client-ca-file=" + keys.frontProxyCA,
		"--requestheader-allowed-names=" + frontProxyName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--enable-aggregator-routing=true",
		"--profiling=" + strconv.FormatBool(opts.Profiling),
		"--v=1",
	}, audit...)...,
	)
	if err != nil {
		return nil, err
	}
	secure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probes of self-signed components
	}}
	if err := waitHTTP(ctx, secure, apiserver, apiURL+"/readyz", keys.adminToken, timeout); err != nil {
		return nil, err
	}

	c.config = &rest.Config{
		Host:            apiURL,
		BearerToken:     keys.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: keys.caPEM},
		QPS:             200,
		Burst:           400,
	}
	if err := writeKubeconfig(c.Kubeconfig, c.config); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	c.Client = client

	// The rest only needs the API server, so it starts together.
	controllers := "*"
	if opts.Controllers != nil {
		controllers = strings.Join(opts.Controllers, ",")
	}
	cmArgs := []string{
		"kube-controller-manager",
		"--kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--controllers=" + controllers,
		"--service-account-private-key-file=" + keys.saKey,
		"--root-ca-file=" + keys.caCert,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(cmPort),
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
		"--v=1",
	}
	if opts.HPASyncPeriod > 0 {
		cmArgs = append(cmArgs, "--horizontal-pod-autoscaler-sync-period="+opts.HPASyncPeriod.String())
	}
	cm, err := c.start(dir, "kube-controller-manager", bins.Kube, cmArgs...)
	if err != nil {
		return nil, err
	}
	sched, err := c.start(dir, "kube-scheduler", bins.Kube, "kube-scheduler",
		"--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--v=1",
	)
	if err != nil {
		return nil, err
	}
	stages := bins.KwokStages
	if opts.PodReadyDelay > 0 {
		if stages, err = writeDelayedReadyStages(dir, stages, opts.PodReadyDelay); err != nil {
			return nil, err
		}
	}
	kwokArgs := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--manage-all-nodes=true",
		"--cidr=" + c.PodCIDR,
		"--node-ip=127.0.0.1",
		"--server-address=127.0.0.1:" + strconv.Itoa(kwokPort),
		"-c", stages,
	}
	if opts.PodStageWorkers > 0 {
		conf, err := writeKwokConfiguration(dir, opts.PodStageWorkers)
		if err != nil {
			return nil, err
		}
		kwokArgs = append(kwokArgs, "-c", conf)
	}
	kwok, err := c.start(dir, "kwok", bins.Kwok, kwokArgs...)
	if err != nil {
		return nil, err
	}
	if err := c.createNode(ctx); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, secure, cm, "https://127.0.0.1:"+strconv.Itoa(cmPort)+"/healthz", "", timeout); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, secure, sched, "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", "", timeout); err != nil {
		return nil, err
	}
	if err := c.waitFor(ctx, kwok, timeout, "node "+NodeName+" Ready", c.nodeReady); err != nil {
		return nil, err
	}
	// The service-account controller creating "default" proves the
	// controller manager's controllers run, not just its health endpoint.
	if err := c.waitFor(ctx, cm, timeout, "service account default/default", func(ctx context.Context) (bool, error) {
		return c.serviceAccountExists(ctx, metav1.NamespaceDefault)
	}); err != nil {
		return nil, err
	}
	// kwok makes its pod IP pool on first use without a lock (v0.8.0
	// PodController.ipPool loads, then stores): pods its stage workers
	// address at once on a new kwok may each make a pool and each get the
	// range's first address. One pod addressed alone makes the pool first.
	if err := c.makePodIPPool(ctx, kwok, timeout); err != nil {
		return nil, err
	}
	if err := c.installCRDs(ctx, crdDirs, timeout); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "test/cluster: cluster ready in %s (API server %s, pod IPs %s, kubeconfig %s)\n",
		time.Since(c.startedAt).Round(10*time.Millisecond), apiURL, c.PodCIDR, c.Kubeconfig)
	return c, nil
}

// Stop stops every component (SIGTERM to its process group, SIGKILL after a
// short grace) and deletes the cluster directory. It is safe to call more
// than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopped = true
		procs := c.procs
		c.mu.Unlock()
		var wg sync.WaitGroup
		// Clients first, etcd last, so the API server does not spend its
		// grace period retrying a dead store.
		for i := len(procs) - 1; i >= 0; i-- {
			p := procs[i]
			if p.name == "etcd" || p.name == "kube-apiserver" {
				continue
			}
			wg.Go(func() { p.stop(3 * time.Second) })
		}
		wg.Wait()
		c.mu.Lock()
		atStop := c.atStop
		c.mu.Unlock()
		for i := len(atStop) - 1; i >= 0; i-- {
			atStop[i]()
		}
		for i := len(procs) - 1; i >= 0; i-- {
			if p := procs[i]; p.name == "etcd" || p.name == "kube-apiserver" {
				p.stop(3 * time.Second)
			}
		}
		if c.slot != nil {
			c.slot()
		}
		_ = os.RemoveAll(c.Dir)
		live.Lock()
		delete(live.clusters, c)
		live.Unlock()
	})
}

// Run starts cmd as a component of the cluster, as the control plane's
// own run: in its own process group, with SIGKILL as its parent-death
// signal, its output in the cluster directory's name.log (its working
// directory when cmd sets none), and stopped by Stop with the other
// components, before the API server and etcd. Its Process stops it sooner.
func (c *Cluster) Run(name string, cmd *exec.Cmd) (*Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, fmt.Errorf("start %s: cluster stopped", name)
	}
	if cmd.Dir == "" {
		cmd.Dir = c.Dir
	}
	p, err := startCmd(c.Dir, name, cmd)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return &Process{p: p}, nil
}

// AtStop runs f when the cluster stops, after every component but the API
// server and etcd has: it releases what those components used (a network
// namespace).
func (c *Cluster) AtStop(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.atStop = append(c.atStop, f)
}

func (c *Cluster) start(dir, name, bin string, args ...string) (*process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, fmt.Errorf("start %s: cluster stopped", name)
	}
	if c.nice > 0 {
		// nice(1) execs bin in the same process, with every thread it
		// makes at that value; setpriority(2) on a started process would
		// miss threads its runtime made before the call.
		bin, args = "nice", append([]string{"-n", strconv.Itoa(c.nice), bin}, args...)
	}
	p, err := startProcess(dir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// waitHTTP polls url until it answers 200, failing early if p exits and with
// p's log tail on timeout.
func waitHTTP(ctx context.Context, client *http.Client, p *process, url, token string, timeout time.Duration) error {
	var last string
	err := pollUntil(ctx, p, timeout, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // not up yet: keep polling
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = resp.Body.Close()
		last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready at %s (last answer: %s): %w\n%s", p.name, url, last, err, p.logTail(30))
	}
	return nil
}

// makePodIPPool runs one pod until kwok gives it an IP, then deletes it.
func (c *Cluster) makePodIPPool(ctx context.Context, kwok *process, timeout time.Duration) error {
	pods := c.Client.CoreV1().Pods(metav1.NamespaceDefault)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tidal-pod-ip-pool"},
		Spec:       corev1.PodSpec{NodeName: NodeName, Containers: []corev1.Container{{Name: "main", Image: "tidal.test/fake:latest"}}},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	if err := c.waitFor(ctx, kwok, timeout, "pod "+pod.Name+" given an IP", func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.PodIP != "", nil
	}); err != nil {
		return err
	}
	if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return c.waitFor(ctx, kwok, timeout, "pod "+pod.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func (c *Cluster) waitFor(ctx context.Context, p *process, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	if err := pollUntil(ctx, p, timeout, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w\n%s", what, err, p.logTail(30))
	}
	return nil
}

// pollUntil polls cond every 100 ms until it holds, p exits, or timeout.
func pollUntil(ctx context.Context, p *process, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := p.running(); err != nil {
			return false, err
		}
		return cond(ctx)
	})
}

func (c *Cluster) createNode(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeName,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{
				"type":                   "kwok",
				"kubernetes.io/hostname": NodeName,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
			},
		},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("1k"),
				corev1.ResourceMemory: resource.MustParse("1Ti"),
				corev1.ResourcePods:   resource.MustParse(podCapacity),
			},
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("1k"),
				corev1.ResourceMemory: resource.MustParse("1Ti"),
				corev1.ResourcePods:   resource.MustParse(podCapacity),
			},
		},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", NodeName, err)
	}
	return nil
}

func (c *Cluster) nodeReady(ctx context.Context) (bool, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return false, nil //nolint:nilerr // keep polling through transient errors
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

func (c *Cluster) serviceAccountExists(ctx context.Context, ns string) (bool, error) {
	_, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["tidal-test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["tidal-test"] = &clientcmdapi.Context{Cluster: "tidal-test", AuthInfo: "admin"}
	kc.CurrentContext = "tidal-test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// takePodNetSlot takes the first free pod-network slot (TakeSlot). The
// locks live in the machine's temporary directory, not in the binary cache:
// loopback addresses belong to the machine, and two checkouts or two cache
// directories (XDG_CACHE_HOME) testing at once must not share a range.
func takePodNetSlot(ctx context.Context) (slot int, release func(), err error) {
	slot, release, err = TakeSlot(ctx, "tidal-podnet-slots", podNetSlots)
	if err != nil {
		return 0, nil, fmt.Errorf("pod network slot: %w", err)
	}
	return slot, release, nil
}

// TakeSlot takes the first free one of n slots of the set named set (a
// directory of lock files under the machine's temporary directory), holding
// a file lock on it until release is called or the process dies, and
// waiting while every slot is taken: a resource of the machine's that
// processes side by side must not share (a pod address range, a network
// link's addresses).
func TakeSlot(ctx context.Context, set string, n int) (slot int, release func(), err error) {
	dir := filepath.Join(os.TempDir(), set)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, nil, err
	}
	for {
		for i := range n {
			f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				return 0, nil, err
			}
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				return i, func() { _ = f.Close() }, nil
			}
			_ = f.Close()
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				return 0, nil, err
			}
		}
		select {
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("all %d slots of %s are taken: %w", n, dir, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// repoRoot is the directory of the main module's go.mod.
func repoRoot() (string, error) {
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	return filepath.Dir(filepath.Dir(src)), nil
}
