package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/netns"
	"github.com/tidalscale/tidal/test/testkit"
)

// knProcess is one of Knative Serving's processes: its controller or its
// autoscaler.
type knProcess struct {
	name    string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// startController runs Knative's controller binary against c with the
// environment its Deployment (config/core/deployments/controller.yaml)
// gives it, under the admin kubeconfig (Knative's RBAC is not under test),
// and stops it when t ends. It runs in a network namespace of its own
// (test/netns) reaching only the API server: it needs nothing else, and its
// health probes' fixed :8080 would take the port Knative's autoscaler needs.
// Its metrics are off (config-observability).
func startController(t *testing.T, bin string, c *cluster.Cluster) *knProcess {
	t.Helper()
	cmd, err := apiNamespace(t, c).Command(bin, "--kubeconfig", c.Kubeconfig)
	if err != nil {
		t.Fatalf("Knative's controller runs in a network namespace of its own: %v", err)
	}
	return startKnative(t, "controller", cmd, "POD_NAME=controller-e2e")
}

// apiNamespace is a network namespace (test/netns) reaching c's API server
// at its address, closed when t ends.
func apiNamespace(t *testing.T, c *cluster.Cluster) *netns.Namespace {
	t.Helper()
	api, err := url.Parse(c.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New(api.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// startAutoscaler runs Knative's autoscaler binary (through wrapper, which
// gives it the test's /etc/hosts for the activator probe) against c with
// the environment its Deployment (config/core/deployments/autoscaler.yaml)
// gives it, and stops it when t ends. Its stats server takes :8080 on every
// address (fixed in cmd/autoscaler/main.go), which must be free: activators
// dial 127.0.0.1:8080. POD_IP is only what its bucket Lease's EndpointSlice
// advertises to other autoscaler replicas, of which there are none; the API
// refuses a loopback address there, so it is autoscalerPodIP, which nothing
// dials.
func startAutoscaler(t *testing.T, wrapper string, c *cluster.Cluster) *knProcess {
	t.Helper()
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(autoscalerStatsPort))
	if err != nil {
		t.Fatalf("Knative's autoscaler serves activators on :%d (fixed in its cmd/autoscaler/main.go), which is taken on this machine: %v", autoscalerStatsPort, err)
	}
	_ = ln.Close()
	cmd := exec.Command(wrapper, "--kubeconfig", c.Kubeconfig)
	return startKnative(t, "autoscaler", cmd, "POD_NAME=autoscaler-e2e", "POD_IP="+autoscalerPodIP)
}

const (
	// autoscalerStatsPort is where Knative's autoscaler takes activator
	// stats, on every address.
	autoscalerStatsPort = 8080
	// autoscalerPodIP is the address Knative's autoscaler advertises in its
	// bucket EndpointSlice (198.18.0.0/15, reserved for benchmarking; the
	// test's Endpoints use it for pods the same way).
	autoscalerPodIP = "198.18.255.254"
)

// startKnative starts cmd with the environment Knative's Deployments give
// their containers plus env, its output in a log file, its profiling
// server on a free port, and stops it when t ends, logging the end of its
// log if t failed.
func startKnative(t *testing.T, name string, cmd *exec.Cmd, env ...string) *knProcess {
	t.Helper()
	prof := testkit.FreeAddr(t)
	_, profPort, _ := net.SplitHostPort(prof)
	k := &knProcess{name: name, cmd: cmd, exited: make(chan struct{}),
		logPath: filepath.Join(t.TempDir(), "knative-"+name+".log")}
	logFile, err := os.Create(k.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(append(os.Environ(),
		"SYSTEM_NAMESPACE="+systemNamespace,
		"CONFIG_LOGGING_NAME=config-logging",
		"CONFIG_OBSERVABILITY_NAME=config-observability",
		"PROFILING_PORT="+profPort,
	), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("start Knative's %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(k.exited) }()
	t.Cleanup(func() {
		k.stop(t)
		if t.Failed() {
			testkit.KeepLog(t, "knative-"+name, k.logTail(1<<20))
		}
	})
	return k
}

// stop sends SIGTERM to the process group and waits, killing it after 15 s.
func (k *knProcess) stop(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(15 * time.Second):
		t.Logf("Knative's %s still running 15 s after SIGTERM: killed", k.name)
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.exited
	}
}

// running fails t if the process has exited.
func (k *knProcess) running(t *testing.T) {
	t.Helper()
	select {
	case <-k.exited:
		t.Fatalf("Knative's %s exited: %v\n%s", k.name, k.cmd.ProcessState, k.logTail(40))
	default:
	}
}

// waitLeader waits until the process leads a bucket of its reconcilers: a
// Lease in knative-serving whose name contains lease ("revision" for the
// controller's revision reconciler, "autoscaler-bucket" for the
// autoscaler's) has a holder.
func (k *knProcess) waitLeader(ctx context.Context, t *testing.T, c *cluster.Cluster, lease string, within time.Duration) {
	t.Helper()
	var err error
	testkit.Eventually(t, within, fmt.Sprintf("Knative's %s to hold a %s Lease", k.name, lease), func() bool {
		k.running(t)
		leases, lerr := c.Client.CoordinationV1().Leases(systemNamespace).List(ctx, metav1.ListOptions{})
		if err = lerr; err != nil {
			return false
		}
		for _, l := range leases.Items {
			// One process of each kind runs at a time.
			if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && strings.Contains(l.Name, lease) {
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("Knative's %s holds no %s Lease (%v)\n%s", k.name, lease, err, k.logTail(40))
	})
}

func (k *knProcess) logTail(n int) string {
	tail, err := cluster.FileTail(k.logPath, n)
	if err != nil {
		return err.Error()
	}
	return tail
}

// String names the process for failure messages.
func (k *knProcess) String() string { return fmt.Sprintf("knative %s (log %s)", k.name, k.logPath) }
