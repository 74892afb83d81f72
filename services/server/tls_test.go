package server

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/identity/pki"
)

// TestCertificateReload: a server serves the certificate its files hold
// now, not the one it started with, so a renewal needs no restart.
func TestCertificateReload(t *testing.T) {
	old := reloadCheck
	reloadCheck = 0
	t.Cleanup(func() { reloadCheck = old })

	p := newTestPKI(t)
	// The server's files start as the actuator's certificate.
	dir := t.TempDir()
	for _, name := range []string{pki.CertFile, pki.KeyFile, pki.CAFile} {
		b, err := os.ReadFile(p.dirs["actuator"] + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/"+name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.dirs["server"] = dir
	addr, _ := startServer(t, p.config(t, "server"), zap.NewNop(), prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := call(ctx, p.dialAs(t, "decider", addr), "/grpc.health.v1.Health/Check", nil); err != nil {
		t.Fatalf("before the renewal: %v", err)
	}

	// "Renew" it into the collector's: a new connection expecting the
	// actuator now refuses the server.
	for _, name := range []string{pki.CertFile, pki.KeyFile} {
		b, err := os.ReadFile(p.dirs["collector"] + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/"+name+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir+"/"+name+".new", dir+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	err := call(ctx, p.dialAs(t, "decider", addr), "/grpc.health.v1.Health/Check", nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "tidal-collector") {
		t.Errorf("after the renewal: %v, want the server's new certificate (the collector's) refused", err)
	}
}
