package chart_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/identity"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	rel "github.com/tidalscale/tidal/test/chart/release"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
)

// helmOn runs the pinned Helm against the test cluster.
func helmOn(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := rel.Helm(ctx, c.Kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHelmInstall is the user's path: helm install on a cluster, waiting
// for the three Deployments; the grpcurl commands NOTES.txt prints work
// against the services; helm upgrade scales one service on its own; helm
// uninstall leaves no cluster-scoped object behind.
func TestHelmInstall(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	rel := "tidal"
	out := helmOn(t, c, "install", rel, "charts/tidal", "--namespace", ns, "--wait", "--timeout", "3m")
	runHooks(t, c, rel, ns)
	notes, ok := strings.CutPrefix(out[strings.Index(out, "NOTES:"):], "NOTES:")
	if !ok {
		t.Fatalf("helm install printed no NOTES:\n%s", out)
	}
	for _, c := range components {
		if !strings.Contains(notes, "tidal-"+c) {
			t.Errorf("NOTES do not name the %s Service:\n%s", c, notes)
		}
	}
	t.Run("notes rollout command", func(t *testing.T) {
		if _, err := exec.LookPath("kubectl"); err != nil {
			t.Skip("no kubectl on this machine")
		}
		var line string
		for _, l := range strings.Split(notes, "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "kubectl ") && strings.Contains(l, "rollout status") {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("NOTES have no kubectl rollout status command:\n%s", notes)
		}
		args := append(strings.Fields(strings.TrimPrefix(line, "kubectl ")), "--timeout", "60s", "--kubeconfig", c.Kubeconfig)
		out, err := exec.Command("kubectl", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		if n := strings.Count(string(out), "successfully rolled out"); n != len(components) {
			t.Errorf("%s: %d Deployments rolled out, want %d:\n%s", line, n, len(components), out)
		}
	})
	t.Run("notes grpcurl commands", func(t *testing.T) { runNotesCommands(t, c, ns, notes) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The generated certificates and their CA survive an upgrade (the
	// hook keeps what is valid), so no pod is handed a new CA mid-flight.
	tlsSecrets := []string{"tidal-tls-ca", "tidal-collector-tls", "tidal-decider-tls", "tidal-actuator-tls", "tidal-reader-tls"}
	before := map[string]map[string][]byte{}
	for _, name := range tlsSecrets {
		sec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after install: Secret %s: %v", name, err)
		}
		before[name] = sec.Data
	}
	helmOn(t, c, "upgrade", rel, "charts/tidal", "--namespace", ns, "--reuse-values", "--set", "decider.replicas=3", "--wait", "--timeout", "3m")
	runHooks(t, c, rel, ns)
	for _, name := range tlsSecrets {
		sec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after upgrade: Secret %s: %v", name, err)
		}
		for k, v := range before[name] {
			if !bytes.Equal(sec.Data[k], v) {
				t.Errorf("after upgrade: Secret %s key %s changed; want the generated certificates kept", name, k)
			}
		}
	}
	for _, svc := range components {
		d, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "tidal-"+svc, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := int32(2)
		if svc == "decider" {
			want = 3
		}
		if d.Status.ReadyReplicas != want {
			t.Errorf("after upgrade: %s has %d ready replicas, want %d", svc, d.Status.ReadyReplicas, want)
		}
	}

	helmOn(t, c, "uninstall", rel, "--namespace", ns, "--wait", "--timeout", "2m")
	for _, svc := range []string{"collector", "actuator"} {
		name := "tidal-" + svc
		if _, err := c.Client.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after uninstall: ClusterRole %s: err = %v, want NotFound", name, err)
		}
		if _, err := c.Client.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after uninstall: ClusterRoleBinding %s: err = %v, want NotFound", name, err)
		}
	}
	// The CRDs stay: Helm never deletes what crds/ installed, so users'
	// PodAutoscalers survive an uninstall.
	if _, err := c.Client.Discovery().ServerResourcesForGroupVersion("autoscaling.tidal.dev/v1alpha1"); err != nil {
		t.Errorf("after uninstall: autoscaling.tidal.dev/v1alpha1 gone: %v", err)
	}
}

// runHooks runs the hooks of the release's last revision as the cluster
// would (see runCertificatesJob): helm waited for the hook Job, which kwok
// marked done without running it.
func runHooks(t *testing.T, c *cluster.Cluster, release, ns string) {
	t.Helper()
	objs, err := rel.Decode(helmOn(t, c, "get", "hooks", release, "--namespace", ns))
	if err != nil {
		t.Fatal(err)
	}
	runCertificatesJob(t, c, objs)
}

// runNotesCommands runs every grpcurl command of the NOTES against the three
// services run as local processes (a port-forward's far end) with the
// certificates and settings the install made (its Secrets and its
// Deployments' environment), with the chart's ports replaced by theirs, in
// a directory holding the reader's certificate as the NOTES fetch it. A
// target "default/hello" is given stats first, as an activator would.
func runNotesCommands(t *testing.T, c *cluster.Cluster, ns, notes string) {
	grpcurl, err := rel.GrpcurlBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := systemBinaries(t)
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secretDir := func(name string) string {
		sec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return writeSecret(t, sec)
	}
	readerDir := secretDir("tidal-reader-tls")
	readerID, err := identity.FromCertificate(leafOf(t, readerDir))
	if err != nil {
		t.Fatal(err)
	}
	start := func(name string, args ...string) *system.Proc {
		dep, err := c.Client.AppsV1().Deployments(ns).Get(ctx, "tidal-"+name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, serviceFlags(t, dep, secretDir("tidal-"+name+"-tls"))...)
		p, err := system.NewProc(name, dir, name, logDir, args...)
		if err != nil {
			t.Fatal(err)
		}
		p.Creds = creds(t, readerDir, "tidal-"+name+"."+ns+".svc")
		if err := p.Start(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Kill() })
		return p
	}
	act := start("actuator", "--scaler", "memory")
	dec := start("decider", "--actuator-addr", act.GRPCAddr)
	// The reader pushes here in the activator's place.
	col := start("collector", "--discovery", "push", "--decider-addr", dec.GRPCAddr, "--authz-pushers", readerID.String())
	ports := map[string]string{"127.0.0.1:9001": col.GRPCAddr, "127.0.0.1:9002": dec.GRPCAddr, "127.0.0.1:9003": act.GRPCAddr}

	conn, err := col.Conn()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	push := func() {
		_, err := collectorv1.NewCollectorServiceClient(conn).PushStats(ctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: &commonv1.TargetRef{Namespace: "default", Name: "hello"}, PodName: "activator-0", AverageConcurrency: 12, RequestCount: 12,
		}}})
		if err != nil {
			t.Fatalf("PushStats: %v", err)
		}
	}
	// Two ticks of stats, so the decider has decided and the actuator has
	// applied it.
	for range 10 {
		push()
		time.Sleep(500 * time.Millisecond)
	}

	var cmds []string
	joined := strings.ReplaceAll(notes, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "grpcurl ") {
			cmds = append(cmds, line)
		}
	}
	if len(cmds) < 5 {
		t.Fatalf("NOTES hold %d grpcurl commands:\n%s", len(cmds), notes)
	}
	for _, line := range cmds {
		args, err := shellWords(strings.TrimPrefix(line, "grpcurl "))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		stream := strings.Contains(line, "/Watch")
		for i, a := range args {
			if addr, ok := ports[a]; ok {
				args[i] = addr
			}
		}
		if stream {
			args = append([]string{"-max-time", "3"}, args...)
		}
		cmd := exec.CommandContext(ctx, grpcurl, args...)
		cmd.Dir = readerDir // ca.crt, tls.crt and tls.key, as the NOTES fetch them
		out, err := cmd.CombinedOutput()
		switch {
		case err == nil:
		case stream && strings.Contains(string(out), "DeadlineExceeded") && strings.Contains(string(out), "decision"):
			// A watch runs until stopped; it sent decisions first.
		default:
			t.Errorf("%s: %v\n%s", line, err, out)
			continue
		}
		t.Logf("%s\n%.300s", line, out)
	}
}

// shellWords splits a command line with single-quoted arguments, as the
// NOTES write them.
func shellWords(s string) ([]string, error) {
	re := regexp.MustCompile(`'[^']*'|\S+`)
	var out []string
	for _, w := range re.FindAllString(s, -1) {
		if strings.HasPrefix(w, "'") {
			if !strings.HasSuffix(w, "'") || len(w) < 2 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			w = w[1 : len(w)-1]
		}
		out = append(out, w)
	}
	return out, nil
}
