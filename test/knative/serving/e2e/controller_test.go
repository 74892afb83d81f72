package e2e

import (
	"context"
	"fmt"
	"net"
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
	"github.com/tidalscale/tidal/test/system"
)

// controllerHealthPort is the port Knative's sharedmain serves its health
// probes on, on every address, with no way to change it
// (knative.dev/pkg injection.HealthCheckDefaultPort).
const controllerHealthPort = 8080

// knController is Knative Serving's controller process.
type knController struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// startController runs Knative's controller binary against c with the
// environment its Deployment (config/core/deployments/controller.yaml)
// gives it, under the admin kubeconfig (Knative's RBAC is not under test),
// and stops it when t ends. Its profiling server gets a free port
// (PROFILING_PORT); its metrics are off (config-observability); its health
// probes take :8080, which must be free.
func startController(t *testing.T, bin string, c *cluster.Cluster) *knController {
	t.Helper()
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(controllerHealthPort))
	if err != nil {
		t.Fatalf("Knative's controller serves its health probes on :%d (fixed in knative.dev/pkg), which is taken on this machine: %v", controllerHealthPort, err)
	}
	_ = ln.Close()
	prof, err := system.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, profPort, _ := net.SplitHostPort(prof)
	k := &knController{exited: make(chan struct{}), logPath: filepath.Join(t.TempDir(), "knative-controller.log")}
	logFile, err := os.Create(k.logPath)
	if err != nil {
		t.Fatal(err)
	}
	k.cmd = exec.Command(bin, "--kubeconfig", c.Kubeconfig)
	k.cmd.Env = append(os.Environ(),
		"SYSTEM_NAMESPACE="+systemNamespace,
		"POD_NAME=controller-e2e",
		"CONFIG_LOGGING_NAME=config-logging",
		"CONFIG_OBSERVABILITY_NAME=config-observability",
		"PROFILING_PORT="+profPort,
	)
	k.cmd.Stdout, k.cmd.Stderr = logFile, logFile
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("start Knative's controller: %v", err)
	}
	go func() { _ = k.cmd.Wait(); _ = logFile.Close(); close(k.exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-k.exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
			<-k.exited
		}
		if t.Failed() {
			t.Logf("Knative's controller log (last 60 lines):\n%s", k.logTail(60))
		}
	})
	return k
}

// running fails t if the controller has exited.
func (k *knController) running(t *testing.T) {
	t.Helper()
	select {
	case <-k.exited:
		t.Fatalf("Knative's controller exited: %v\n%s", k.cmd.ProcessState, k.logTail(40))
	default:
	}
}

// waitLeader waits until the controller leads its reconcilers' buckets:
// its Leases in knative-serving name it as holder.
func (k *knController) waitLeader(ctx context.Context, t *testing.T, c *cluster.Cluster, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		k.running(t)
		leases, err := c.Client.CoordinationV1().Leases(systemNamespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			held := 0
			for _, l := range leases.Items {
				// The holder is the host name and a UUID
				// (knative.dev/pkg leaderelection.UniqueID); this
				// cluster runs one controller.
				if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && strings.Contains(l.Name, "revision") {
					held++
				}
			}
			if held > 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Knative's controller holds no revision reconciler Lease after %v (%v)\n%s", within, err, k.logTail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (k *knController) logTail(n int) string {
	b, err := os.ReadFile(k.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// String names the process for failure messages.
func (k *knController) String() string { return fmt.Sprintf("knative controller (log %s)", k.logPath) }
