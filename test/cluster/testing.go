package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// shared is the one cluster of a test binary, started by the first Shared
// call and stopped by Main.
var shared struct {
	once sync.Once
	opts Options // MainWith's
	c    *Cluster
	err  error
}

// Main runs a test binary's tests and then stops the shared cluster, if a
// test started one, and any other cluster a test left running. Use it as the whole of TestMain:
//
//	func TestMain(m *testing.M) { cluster.Main(m) }
//
// SIGINT and SIGTERM also stop the cluster before the process exits, so an
// interrupted `go test` leaves no control plane running; a SIGKILL is covered
// by each component's parent-death signal.
func Main(m *testing.M) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "test/cluster: %v: stopping the test cluster\n", s)
		stopAll() // also clusters still starting
		os.Exit(130)
	}()
	code := m.Run()
	stopAll()
	os.Exit(code)
}

// MainWith is Main for a test binary whose shared cluster is started with
// opts (test/keda's: a shorter HPA sync).
func MainWith(m *testing.M, opts Options) {
	shared.opts = opts
	Main(m)
}

// Shared returns the test binary's cluster, starting it on first use (and
// building the control plane first if the cache lacks it, which takes many
// minutes: run such tests with `go test -timeout 60m`). The package's
// TestMain must call Main. With -short the test is skipped instead. Tests
// share the cluster, so each should work in its own Namespace.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("test/cluster: skipped in -short mode: needs a Kubernetes control plane (built on first use, then cached)")
	}
	shared.once.Do(func() {
		// Stop a cold build short of the test binary's deadline so the
		// failure explains itself instead of being a timeout panic.
		ctx := context.Background()
		if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
			if deadline, ok := d.Deadline(); ok {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, deadline.Add(-30*time.Second))
				defer cancel()
			}
		}
		shared.c, shared.err = Start(ctx, shared.opts)
	})
	if shared.err != nil {
		t.Fatalf("test cluster: %v", shared.err)
	}
	return shared.c
}

// Namespace creates a namespace for t, named after the test, waits until pods
// can be created in it (its default ServiceAccount exists), and deletes it
// when t ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(t.Name())}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	t.Cleanup(func() {
		// Deletion finishes in the background; the name is never reused.
		err := c.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil {
			t.Logf("delete namespace %s: %v", ns.Name, err)
		}
	})
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return c.serviceAccountExists(ctx, ns.Name)
	})
	if err != nil {
		t.Fatalf("namespace %s: default service account: %v", ns.Name, err)
	}
	return ns.Name
}

// namespaceName turns a test name into a DNS label with a random suffix.
func namespaceName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 50 {
		name = strings.TrimRight(name[:50], "-")
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	return name + "-" + hex.EncodeToString(suffix)
}
