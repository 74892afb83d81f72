// Package testkit is what tidal's tests share to wait and to stand in for a
// service: Eventually (polling with apimachinery's wait, never a sleep),
// FreePorts, TestFunctions (for documents naming their tests), and a decider to stream to (Decider, or any DeciderService
// served by ServeDecider). The harnesses that build and start the real
// binaries are test/system and test/cluster.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Eventually fails t unless cond holds within within, checking it at once
// and then every within/200 (5 ms to 100 ms). It returns when cond first
// held. describe, when given, says more on failure (the cluster's state).
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool, describe ...func() string) time.Time {
	t.Helper()
	interval := min(max(within/200, 5*time.Millisecond), 100*time.Millisecond)
	err := wait.PollUntilContextTimeout(context.Background(), interval, within, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		msg := fmt.Sprintf("waiting %s for %s: %v", within, what, err)
		for _, d := range describe {
			msg += "\n" + d()
		}
		t.Fatal(msg)
	}
	return time.Now()
}

// FreePorts returns n distinct TCP ports free on 127.0.0.1 now: each is
// taken by a listener until all n are, then released for the caller.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer func() { _ = ln.Close() }()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0])
}

// ServeDecider serves d over gRPC on addr ("" for a free loopback port)
// until t ends or stop is called, which waits for the server to end. A
// given addr is retried for up to 5 s, for a decider restarted on the port
// its predecessor just left.
func ServeDecider(t testing.TB, d deciderv1.DeciderServiceServer, addr string, opts ...grpc.ServerOption) (listening string, stop func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("decider on %s: %v", addr, err)
	}
	gs := grpc.NewServer(opts...)
	deciderv1.RegisterDeciderServiceServer(gs, d)
	done := make(chan struct{})
	go func() { _ = gs.Serve(ln); close(done) }()
	stop = sync.OnceFunc(func() { gs.Stop(); <-done })
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// Decider is a decider that keeps every batch streamed to it.
type Decider struct {
	deciderv1.UnimplementedDeciderServiceServer
	// Addr is where it listens.
	Addr string

	// mu guards batches.
	mu      sync.Mutex
	batches []*deciderv1.IngestRequest
}

// StartDecider serves a Decider on a loopback port until t ends.
func StartDecider(t testing.TB) *Decider {
	t.Helper()
	d := &Decider{}
	d.Addr, _ = ServeDecider(t, d, "")
	return d
}

// Ingest keeps each batch.
func (d *Decider) Ingest(st deciderv1.DeciderService_IngestServer) error {
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&deciderv1.IngestResponse{})
		}
		if err != nil {
			return err
		}
		d.mu.Lock()
		d.batches = append(d.batches, req)
		d.mu.Unlock()
	}
}

// Samples returns the samples received for the target key (TargetRef.Key),
// in the order they came, and whether its spec came.
func (d *Decider) Samples(key string) (samples []*commonv1.MetricSample, spec bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range d.batches {
		for _, s := range b.GetSpecs() {
			spec = spec || s.GetTarget().Key() == key
		}
		for _, m := range b.GetMetrics() {
			if m.GetTarget().Key() == key {
				samples = append(samples, m.GetSamples()...)
			}
		}
	}
	return samples, spec
}

// Targets is the number of targets samples came for.
func (d *Decider) Targets() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	keys := map[string]bool{}
	for _, b := range d.batches {
		for _, m := range b.GetMetrics() {
			keys[m.GetTarget().Key()] = true
		}
	}
	return len(keys)
}

// TestFunctions are the names of the test and fuzz functions declared in
// the _test.go files under root, other modules' included, hidden
// directories, vendor, node_modules and testdata left out: what a document
// that names its tests can be checked against.
func TestFunctions(root string) (map[string]bool, error) {
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "vendor" || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			funcs[string(m[1])] = true
		}
		return nil
	})
	return funcs, err
}

// keptRuns is how many test binaries' kept logs stay in os.TempDir()'s
// tidal-failed directory: the newest, the rest pruned when a run first keeps.
const keptRuns = 20

var keep struct {
	once sync.Once
	dir  string // this run's directory under tidal-failed
	err  error
}

// KeepLog writes text (a process's log, the cluster's state) to a file that
// outlives the test and logs only its path and size in bytes. A failed test's output
// then ends with its own failure messages, which are what CI shows of it,
// not with hundreds of lines of logs; the logs are still there after CI has
// removed the test's temporary directories.
func KeepLog(t testing.TB, name, text string) {
	t.Helper()
	keep.once.Do(func() {
		root := filepath.Join(os.TempDir(), "tidal-failed")
		keep.dir = filepath.Join(root, fmt.Sprintf("%s-%d", time.Now().UTC().Format("20060102T150405"), os.Getpid()))
		if keep.err = os.MkdirAll(keep.dir, 0o755); keep.err != nil {
			return
		}
		pruneKept(root)
	})
	if keep.err != nil {
		t.Logf("%s: cannot keep its log: %v", name, keep.err)
		return
	}
	dir := filepath.Join(keep.dir, unsafeChars.ReplaceAllString(t.Name(), "_"))
	path := filepath.Join(dir, unsafeChars.ReplaceAllString(name, "_")+".log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("%s: cannot keep its log: %v", name, err)
		return
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Logf("%s: cannot keep its log: %v", name, err)
		return
	}
	t.Logf("%s: %d bytes kept in %s", name, len(text), path)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// pruneKept removes all but the newest keptRuns runs' directories (their
// names start with the time, so they sort by age).
func pruneKept(root string) {
	entries, err := os.ReadDir(root)
	if err != nil || len(entries) <= keptRuns {
		return
	}
	for _, e := range entries[:len(entries)-keptRuns] {
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
	}
}
