package chart_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/test/system"
)

// pki is a CA and one certificate it signed, laid out as the chart's TLS
// Secret (tls.crt, tls.key, ca.crt) in dir.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPool *x509.CertPool
}

func newPKI(t *testing.T, dnsName string) *pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tidal test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), ca: ca, caKey: caKey, caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	certPEM, keyPEM := p.issue(t, dnsName)
	for name, data := range map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.crt": certPEM,
		"tls.key": keyPEM,
	} {
		if err := os.WriteFile(filepath.Join(p.dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// issue signs a certificate for dnsName usable as server and as client.
func (p *pki) issue(t *testing.T, dnsName string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: dnsName},
		DNSNames:  []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}

func (p *pki) clientCreds(t *testing.T, serverName string) credentials.TransportCredentials {
	t.Helper()
	return secretCreds(t, p.dir, serverName)
}

// secretCreds are a client's credentials from a directory laid out as the
// TLS Secret: its certificate, and its CA as the roots.
func secretCreds(t *testing.T, dir, serverName string) credentials.TransportCredentials {
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

// scriptSecret runs hack/chart-tls-secret.sh and mounts the Secret it
// writes the way the kubelet does: one file per data key.
func scriptSecret(t *testing.T, fullname, namespace string) string {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("hack/chart-tls-secret.sh needs openssl, which this machine lacks")
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", "chart-tls-secret.sh"), fullname, namespace, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/chart-tls-secret.sh: %v\n%s", err, b)
	}
	b, err := os.ReadFile(filepath.Join(out, "secret.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sec corev1.Secret
	if err := yaml.UnmarshalStrict(b, &sec); err != nil {
		t.Fatalf("secret.yaml: %v", err)
	}
	if sec.Type != corev1.SecretTypeTLS || sec.Name != fullname+"-mtls" || sec.Namespace != namespace {
		t.Errorf("secret.yaml: %s/%s of type %s, want %s/%s-mtls of type %s", sec.Namespace, sec.Name, sec.Type, namespace, fullname, corev1.SecretTypeTLS)
	}
	mount := t.TempDir()
	for _, key := range []string{"tls.crt", "tls.key", "ca.crt"} {
		data, ok := sec.Data[key]
		if !ok {
			t.Fatalf("secret.yaml lacks key %s", key)
		}
		if err := os.WriteFile(filepath.Join(mount, key), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return mount
}

// tlsFlags turns the TIDAL_TLS_ variables the chart gives a service into
// flags, with the Secret's mount path replaced by dir: the same mapping
// services/server.ParseFlags makes.
func tlsFlags(t *testing.T, dep *appsv1.Deployment, dir string) []string {
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
		name, ok := strings.CutPrefix(e.Name, "TIDAL_TLS_")
		if !ok {
			continue
		}
		v := e.Value
		if rest, ok := strings.CutPrefix(v, mount+"/"); ok && mount != "" {
			v = filepath.Join(dir, rest)
		}
		flags = append(flags, "--tls-"+strings.ToLower(strings.ReplaceAll(name, "_", "-"))+"="+v)
	}
	if len(flags) != 4 {
		t.Fatalf("%s: TLS flags %v, want cert, key, CA and server name", dep.Name, flags)
	}
	return flags
}

// tlsProc is a service process started with TLS; test/system's Proc checks
// health in plaintext, so this waits on the plain HTTP /readyz instead.
type tlsProc struct {
	grpcAddr, httpAddr string
	cmd                *exec.Cmd
	log                *os.File
}

func startTLSProc(t *testing.T, bin string, args ...string) *tlsProc {
	t.Helper()
	g, err := system.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	h, err := system.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + h + "/readyz") //nolint:noctx // a loopback probe
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("%s not ready: %v\n%s", bin, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMTLS runs the three services with the TLS settings the chart renders
// and a Secret whose certificate carries only the chart's default
// tls.serverName: pushed stats flow collector → decider → actuator over
// mutual TLS, and clients without a certificate of the CA, or checking
// another name, are refused. The Secret comes from a CA made here, and from
// hack/chart-tls-secret.sh.
func TestMTLS(t *testing.T) {
	t.Parallel()
	serverName := "sec-tidal.tidal.svc" // the default: FULLNAME.NAMESPACE.svc
	t.Run("generated", func(t *testing.T) {
		t.Parallel()
		testMTLS(t, newPKI(t, serverName).dir, serverName)
	})
	t.Run("hack/chart-tls-secret.sh", func(t *testing.T) {
		t.Parallel()
		testMTLS(t, scriptSecret(t, "sec-tidal", "tidal"), serverName)
	})
}

func testMTLS(t *testing.T, secretDir, serverName string) {
	r := release{name: "sec", namespace: "tidal", set: []string{"tls.enabled=true", "tls.secretName=tidal-mtls"}}
	m := manifest(render(t, r))
	bins := serviceBinaries(t)
	flags := map[string][]string{}
	for _, c := range components {
		dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", "sec-tidal-"+c))
		flags[c] = tlsFlags(t, dep, secretDir)
		if want := "--tls-server-name=" + serverName; !strings.Contains(strings.Join(flags[c], " "), want) {
			t.Fatalf("%s flags %v lack %s", c, flags[c], want)
		}
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

	// Refused: plaintext, and a certificate from another CA.
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":        insecure.NewCredentials(),
		"another CA":       newPKI(t, serverName).clientCreds(t, serverName),
		"wrong serverName": secretCreds(t, secretDir, "decider.example.com"),
	} {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := healthpb.NewHealthClient(dial(dec.grpcAddr, creds)).Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
		if err == nil {
			t.Errorf("%s client: the decider answered; want the handshake refused", name)
		}
	}

	// Accepted: a certificate of the CA; the stat travels to the actuator.
	creds := secretCreds(t, secretDir, serverName)
	target := &commonv1.TargetRef{Namespace: "default", Name: "hello"}
	collector := collectorv1.NewCollectorServiceClient(dial(col.grpcAddr, creds))
	actuator := actuatorv1.NewActuatorServiceClient(dial(act.grpcAddr, creds))
	var last error
	for ctx.Err() == nil {
		_, err := collector.PushStats(ctx, &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{
			Target: target, PodName: "activator-0", AverageConcurrency: 12, RequestCount: 12,
		}}})
		if err != nil {
			t.Fatalf("PushStats over mTLS: %v", err)
		}
		got, err := actuator.GetScale(ctx, &actuatorv1.GetScaleRequest{Target: target})
		if err == nil && got.GetReplicas() >= 1 {
			t.Logf("collector → decider → actuator over mTLS: %s at %d replicas", target.Key(), got.GetReplicas())
			return
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the actuator never scaled %s over mTLS (last GetScale: %v)", target.Key(), fmt.Sprint(last))
}
