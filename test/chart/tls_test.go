package chart_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/pki"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// pusherID is the activator the TLS tests name in authz.pushers.
const pusherID = "spiffe://cluster.local/ns/knative-serving/sa/activator"

// writeSecret lays a kubernetes.io/tls Secret out as the kubelet mounts it:
// one file per data key.
func writeSecret(t *testing.T, sec *corev1.Secret) string {
	t.Helper()
	dir := t.TempDir()
	for _, key := range []string{"tls.crt", "tls.key", "ca.crt"} {
		data, ok := sec.Data[key]
		if !ok {
			t.Fatalf("Secret %s lacks key %s", sec.Name, key)
		}
		if err := os.WriteFile(filepath.Join(dir, key), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// leafOf parses the certificate of a Secret mounted in dir.
func leafOf(t *testing.T, dir string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s/tls.crt holds no PEM", dir)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// serviceFlags turns the TIDAL_TLS_, TIDAL_AUTHZ_ and TIDAL_MAX_ variables
// the chart gives a service into flags, with the Secret's mount path
// replaced by dir: the same mapping services/server.ParseFlags makes.
func serviceFlags(t *testing.T, dep *appsv1.Deployment, dir string) []string {
	t.Helper()
	spec := dep.Spec.Template.Spec
	mount := ""
	for _, vm := range spec.Containers[0].VolumeMounts {
		if vm.Name == "tls" {
			mount = vm.MountPath
		}
	}
	var flags []string
	for _, e := range spec.Containers[0].Env {
		name, ok := strings.CutPrefix(e.Name, "TIDAL_")
		if !ok || !slices.ContainsFunc([]string{"TLS_", "AUTHZ_", "MAX_"}, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		v := e.Value
		if rest, ok := strings.CutPrefix(v, mount+"/"); ok && mount != "" {
			v = filepath.Join(dir, rest)
		}
		flags = append(flags, "--"+strings.ToLower(strings.ReplaceAll(name, "_", "-"))+"="+v)
	}
	if len(flags) < 6 {
		t.Fatalf("%s: TLS and authz flags %v, want cert, key, CA and the identities", dep.Name, flags)
	}
	return flags
}

// creds are a client's credentials from a directory laid out as a TLS
// Secret, checking the server's name.
func creds(t *testing.T, dir, serverName string) credentials.TransportCredentials {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s/ca.crt holds no certificate", dir)
	}
	return credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13})
}

// tlsProc is a service process started with TLS; it waits on the plain
// HTTP /readyz.
type tlsProc struct {
	grpcAddr, httpAddr string
	cmd                *exec.Cmd
	log                *os.File
}

func startTLSProc(t *testing.T, bin string, args ...string) *tlsProc {
	t.Helper()
	g := testkit.FreeAddr(t)
	h := testkit.FreeAddr(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(bin)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &tlsProc{grpcAddr: g, httpAddr: h, log: logf}
	p.cmd = exec.Command(bin, append([]string{"--grpc-addr", g, "--http-addr", h}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("--- %s log ---\n%s", filepath.Base(bin), b)
		}
		logf.Close()
	})
	testkit.Eventually(t, 30*time.Second, filepath.Base(bin)+" ready", func() bool {
		resp, err := http.Get("http://" + h + "/readyz") //nolint:noctx // a loopback probe
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string { b, _ := os.ReadFile(logf.Name()); return string(b) })
	return p
}

// runCertificatesJob does with the chart's certificate Job what a kubelet
// would (kwok, which runs the test cluster's pods, only marks it done): it
// applies the hook's ServiceAccount, Roles and RoleBindings from objs and
// runs the Job's container (the actuator built as for its image) with its
// arguments and environment, authenticated as the Job's ServiceAccount.
func runCertificatesJob(t *testing.T, c *cluster.Cluster, objs manifest) {
	t.Helper()
	jobs := objs.ofKind("Job")
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs rendered, want the certificate Job", len(jobs))
	}
	job := typed[batchv1.Job](t, jobs[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newApplier(t, c)
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding"} {
		for _, o := range objs.ofKind(kind) {
			if o.GetAnnotations()["helm.sh/hook"] == "" {
				continue
			}
			ensureNamespace(t, c, o.GetNamespace())
			if err := a.Apply(ctx, o, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	pod := job.Spec.Template.Spec
	cfg, err := c.ServiceAccountConfig(ctx, job.Namespace, pod.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := c.WriteKubeconfig(job.Namespace+"-"+pod.ServiceAccountName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctr := pod.Containers[0]
	cmd := exec.CommandContext(ctx, serviceBinaries(t)["actuator"], append(slices.Clone(ctr.Args), "--kubeconfig", kubeconfig)...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	for _, e := range ctr.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the certificate Job's container: %v\n%s", err, out)
	}
}

// secretData reads a Secret's data from the cluster.
func secretData(t *testing.T, c *cluster.Cluster, ns, name string) *corev1.Secret {
	t.Helper()
	sec, err := c.Client.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// TestGeneratedCertificates checks the default mode on a cluster: the hook
// Job, run as its own ServiceAccount (whose Roles reach no other Secret),
// makes a CA Secret no pod mounts and one certificate per service and one
// for people, each naming its ServiceAccount's SPIFFE ID as its one URI SAN
// and its Service's DNS names, all signed by that CA; the services take
// identities from URI SANs alone; a second run (an upgrade) changes
// nothing.
func TestGeneratedCertificates(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	r := release{name: "tidal", namespace: ns}
	m, _ := install(t, c, r, false)
	job := typed[batchv1.Job](t, m.get(t, "Job", "tidal-certificates"))
	for k, want := range map[string]string{"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"} {
		for _, o := range []*unstructured.Unstructured{m.get(t, "Job", "tidal-certificates"), m.get(t, "ServiceAccount", "tidal-certificates"), m.get(t, "Role", "tidal-certificates"), m.get(t, "RoleBinding", "tidal-certificates")} {
			if got := o.GetAnnotations()[k]; got != want {
				t.Errorf("%s %s: %s = %q, want %q", o.GetKind(), o.GetName(), k, got, want)
			}
		}
	}
	if img := job.Spec.Template.Spec.Containers[0].Image; !strings.Contains(img, "/tidal-actuator:") {
		t.Errorf("certificate Job runs %s, want the actuator's image", img)
	}
	runCertificatesJob(t, c, m)

	names := []string{"tidal-tls-ca"}
	for _, name := range []string{"collector", "decider", "actuator", "reader"} {
		names = append(names, "tidal-"+name+"-tls")
	}
	caSec := secretData(t, c, ns, "tidal-tls-ca")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caSec.Data["tls.crt"]) {
		t.Fatal("tidal-tls-ca holds no certificate")
	}
	for _, dep := range m.ofKind("Deployment") {
		for _, v := range typed[appsv1.Deployment](t, dep).Spec.Template.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == caSec.Name {
				t.Errorf("Deployment %s mounts the CA's Secret: its key must reach no pod", dep.GetName())
			}
		}
		for _, e := range typed[appsv1.Deployment](t, dep).Spec.Template.Spec.Containers[0].Env {
			if strings.Contains(e.Name, "COMMON_NAME") {
				t.Errorf("Deployment %s sets %s: identities come from URI SANs alone", dep.GetName(), e.Name)
			}
		}
	}
	versions := map[string]string{}
	for _, name := range []string{"collector", "decider", "actuator", "reader"} {
		sec := secretData(t, c, ns, "tidal-"+name+"-tls")
		versions[sec.Name] = sec.ResourceVersion
		leaf := leafOf(t, writeSecret(t, sec))
		want := "spiffe://cluster.local/ns/" + ns + "/sa/tidal-" + name
		id, err := identity.FromCertificate(leaf)
		if err != nil || id.String() != want {
			t.Errorf("%s: identity %v, %v; want %s as the URI SAN", name, id, err, want)
		}
		opts := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if name != "reader" {
			opts.DNSName = "tidal-" + name + "." + ns + ".svc"
			opts.KeyUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		}
		if _, err := leaf.Verify(opts); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The Job's rights: the release's certificate Secrets by name, and
	// creating Secrets (which RBAC cannot limit by name); nothing else.
	role := m.get(t, "Role", "tidal-certificates")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if got := fmt.Sprint(rules); got != fmt.Sprintf("[map[apiGroups:[] resources:[secrets] verbs:[create]] map[apiGroups:[] resourceNames:[%s] resources:[secrets] verbs:[get update]]]", strings.Join(slices.Sorted(slices.Values(names)), " ")) {
		t.Errorf("the Job's Role: %s", got)
	}
	acc := serviceAccount(t, c, ns, "tidal-certificates")
	if acc.can(t, "get", "", "secrets", "", ns, "sh.helm.release.v1.tidal.v1") || acc.can(t, "list", "", "secrets", "", ns, "") || acc.can(t, "delete", "", "secrets", "", ns, "tidal-tls-ca") {
		t.Error("the certificate Job may read or delete other Secrets")
	}

	runCertificatesJob(t, c, m)
	for name, v := range versions {
		if got := secretData(t, c, ns, name).ResourceVersion; got != v {
			t.Errorf("%s rewritten by a second run with nothing to renew", name)
		}
	}
}

// TestCertManagerCertificates: with tls.mode=cert-manager the chart asks
// cert-manager for a Certificate per identity whose URI SAN is the SPIFFE
// ID, and renders no certificate Job.
func TestCertManagerCertificates(t *testing.T) {
	t.Parallel()
	r := release{name: "tidal", namespace: "tidal-system", set: []string{"tls.mode=cert-manager", "tls.certManager.issuerRef.name=tidal-ca", "tls.certManager.issuerRef.kind=ClusterIssuer"}}
	m := manifest(render(t, r))
	if m.find("Secret", "tidal-tls-ca") != nil || len(m.ofKind("Job")) != 0 {
		t.Error("cert-manager mode renders a CA Secret or a certificate Job")
	}
	for _, name := range []string{"collector", "decider", "actuator", "reader"} {
		cert := m.get(t, "Certificate", "tidal-"+name)
		spec, _ := cert.Object["spec"].(map[string]any)
		want := "spiffe://cluster.local/ns/tidal-system/sa/tidal-" + name
		if got := fmt.Sprint(spec["uris"]); got != "["+want+"]" {
			t.Errorf("%s: uris %s, want [%s]", name, got, want)
		}
		if got := spec["secretName"]; got != "tidal-"+name+"-tls" {
			t.Errorf("%s: secretName %v", name, got)
		}
		usages := fmt.Sprint(spec["usages"])
		if !strings.Contains(usages, "server auth") || !strings.Contains(usages, "client auth") {
			t.Errorf("%s: usages %s, want server auth and client auth", name, usages)
		}
		issuer, _ := spec["issuerRef"].(map[string]any)
		if issuer["name"] != "tidal-ca" || issuer["kind"] != "ClusterIssuer" {
			t.Errorf("%s: issuerRef %v", name, issuer)
		}
	}
}

// TestMTLS runs the three services with the settings and certificates the
// chart renders: the chart's generated Secrets, and Secrets made by
// go run ./hack/certs -secrets for tls.mode=secret. Stats pushed by an
// activator flow collector → decider → actuator, each service presenting
// its own certificate; only the decider's may Scale; clients without a
// certificate of the CA are refused at the handshake.
func TestMTLS(t *testing.T) {
	t.Parallel()
	t.Run("generated", func(t *testing.T) {
		c := cluster.Shared(t)
		ns := c.Namespace(t)
		r := release{name: "sec", namespace: ns, set: []string{"authz.pushers[0]=" + pusherID}}
		m, _ := install(t, c, r, false)
		runCertificatesJob(t, c, m)
		dirs := map[string]string{}
		for _, name := range []string{"collector", "decider", "actuator", "reader"} {
			dirs[name] = writeSecret(t, secretData(t, c, ns, "sec-tidal-"+name+"-tls"))
		}
		// The activator's certificate comes from the chart's CA, with its
		// identity as URI SAN, as an operator would make it with hack/certs.
		caSec := secretData(t, c, ns, "sec-tidal-tls-ca")
		caDir := t.TempDir()
		for k, v := range map[string][]byte{"ca.crt": caSec.Data["tls.crt"], "ca.key": caSec.Data["tls.key"]} {
			if err := os.WriteFile(filepath.Join(caDir, k), v, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		dirs["pusher"] = issueFrom(t, caDir, pusherID)
		testMTLS(t, m, "sec-tidal", ns, dirs)
	})
	t.Run("secret from hack/certs", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		cmd := exec.Command("go", "run", "./hack/certs", "-namespace", "tidal", "-prefix", "sec-tidal", "-secrets",
			"-identity", "activator="+pusherID, out)
		cmd.Dir = repoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go run ./hack/certs: %v\n%s", err, b)
		}
		dirs := map[string]string{}
		for _, name := range []string{"collector", "decider", "actuator", "reader", "activator"} {
			b, err := os.ReadFile(filepath.Join(out, name, "secret.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var sec corev1.Secret
			if err := yaml.UnmarshalStrict(b, &sec); err != nil {
				t.Fatalf("%s/secret.yaml: %v", name, err)
			}
			if want := "sec-tidal-" + name + "-tls"; sec.Name != want || sec.Namespace != "tidal" || sec.Type != corev1.SecretTypeTLS {
				t.Errorf("%s/secret.yaml: %s/%s of type %s, want tidal/%s of type %s", name, sec.Namespace, sec.Name, sec.Type, want, corev1.SecretTypeTLS)
			}
			dirs[name] = writeSecret(t, &sec)
		}
		dirs["pusher"] = dirs["activator"]
		r := release{name: "sec", namespace: "tidal", set: []string{"tls.mode=secret", "authz.pushers[0]=" + pusherID}}
		m := manifest(render(t, r))
		for _, c := range components {
			dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", "sec-tidal-"+c))
			if got := dep.Spec.Template.Spec.Volumes; !slices.ContainsFunc(got, func(v corev1.Volume) bool {
				return v.Secret != nil && v.Secret.SecretName == "sec-tidal-"+c+"-tls"
			}) {
				t.Errorf("%s mounts no Secret sec-tidal-%s-tls, the name hack/certs gives", c, c)
			}
		}
		testMTLS(t, m, "sec-tidal", "tidal", dirs)
	})
}

// issueFrom issues a certificate for id from the CA whose ca.crt and ca.key
// are in caDir, as an operator would with hack/certs, into a directory laid
// out as a TLS Secret.
func issueFrom(t *testing.T, caDir, id string) string {
	t.Helper()
	ca, err := pki.LoadCA(filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := identity.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := ca.Issue(pki.Leaf{ID: parsed, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "leaf")
	if err := ca.WriteDir(dir, iss); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testMTLS(t *testing.T, m manifest, fullname, namespace string, dirs map[string]string) {
	bins := serviceBinaries(t)
	flags := map[string][]string{}
	for _, c := range components {
		flags[c] = serviceFlags(t, typed[appsv1.Deployment](t, m.get(t, "Deployment", fullname+"-"+c)), dirs[c])
	}
	act := startTLSProc(t, bins["actuator"], append([]string{"--scaler", "memory"}, flags["actuator"]...)...)
	dec := startTLSProc(t, bins["decider"], append([]string{"--actuator-addr", act.grpcAddr}, flags["decider"]...)...)
	col := startTLSProc(t, bins["collector"], append([]string{"--discovery", "push", "--decider-addr", dec.grpcAddr}, flags["collector"]...)...)

	dial := func(addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	host := func(c string) string { return fullname + "-" + c + "." + namespace + ".svc" }

	// Refused at the handshake: plaintext, another CA, the wrong name.
	other, err := pki.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := other.Issue(pki.Leaf{ID: identity.MustNew("cluster.local", namespace, fullname+"-collector"), DNSNames: []string{host("decider")}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	if err := other.WriteDir(otherDir, iss); err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":        insecure.NewCredentials(),
		"another CA":       creds(t, otherDir, host("decider")),
		"wrong serverName": creds(t, dirs["reader"], host("actuator")),
	} {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := healthpb.NewHealthClient(dial(dec.grpcAddr, creds)).Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
		if err == nil {
			t.Errorf("%s client: the decider answered; want the handshake refused", name)
		}
	}

	// Only a decider (or an operator) may Scale.
	scale := &actuatorv1.ScaleRequest{Target: &commonv1.TargetRef{Namespace: "default", Name: "by-hand"}, DecisionSequence: 1, DesiredReplicas: 2}
	for _, caller := range []string{"collector", "reader", "pusher"} {
		_, err := actuatorv1.NewActuatorServiceClient(dial(act.grpcAddr, creds(t, dirs[caller], host("actuator")))).Scale(ctx, scale)
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("Scale with the %s's certificate: %v, want PERMISSION_DENIED", caller, err)
		}
	}
	if _, err := actuatorv1.NewActuatorServiceClient(dial(act.grpcAddr, creds(t, dirs["decider"], host("actuator")))).Scale(ctx, scale); err != nil {
		t.Errorf("Scale with the decider's certificate: %v, want OK", err)
	}
	// Only pushers may push.
	push := func(caller string) error {
		_, err := collectorv1.NewCollectorServiceClient(dial(col.grpcAddr, creds(t, dirs[caller], host("collector")))).PushStats(ctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: &commonv1.TargetRef{Namespace: "default", Name: "hello"}, PodName: "activator-0", AverageConcurrency: 12, RequestCount: 12,
		}}})
		return err
	}
	if err := push("reader"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("PushStats with the reader's certificate: %v, want PERMISSION_DENIED", err)
	}

	// The loop: the activator's stats reach the actuator through the
	// collector's and the decider's own certificates.
	reader := actuatorv1.NewActuatorServiceClient(dial(act.grpcAddr, creds(t, dirs["reader"], host("actuator"))))
	target := &commonv1.TargetRef{Namespace: "default", Name: "hello"}
	var last error
	for ctx.Err() == nil {
		if err := push("pusher"); err != nil {
			t.Fatalf("PushStats with the pusher's certificate: %v", err)
		}
		got, err := reader.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: target})
		if err == nil && got.GetReplicas() >= 1 {
			t.Logf("collector → decider → actuator over mTLS: %s at %d replicas", target.Key(), got.GetReplicas())
			return
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the actuator never scaled %s over mTLS (last GetScale: %v)", target.Key(), last)
}
