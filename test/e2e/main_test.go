// Package e2e proves tidal's closed loop the way users run it: the
// collector, decider and actuator as separate processes (test/system) on a
// real kube-apiserver with kwok pods (test/cluster), simulated workloads
// whose pods serve queue-proxy metrics (test/workload), and Kafka over its
// wire protocol (kfake). The tests share one cluster and run one after
// another, each in its own namespace with its own set of processes.
package e2e

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/system"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

// binaries builds the three services once per test binary.
var binaries struct {
	once sync.Once
	dir  string
	err  error
	log  bytes.Buffer
}

func binDir(t *testing.T) string {
	t.Helper()
	binaries.once.Do(func() {
		binaries.dir, binaries.err = system.BuildTemp(context.Background(), &binaries.log)
	})
	if binaries.err != nil {
		t.Fatalf("build: %v\n%s", binaries.err, binaries.log.String())
	}
	return binaries.dir
}

// kpaConfig is the config-autoscaler both the decider and the actuator get:
// a short scale-to-zero grace so idle targets reach zero in seconds.
var kpaConfig = map[string]string{
	"scale-to-zero-grace-period": "6s",
}

// startSystem runs the three services against the shared cluster until t
// ends; on failure it keeps each process's log (testkit.KeepLog).
func startSystem(t *testing.T, opts system.Options) *system.System {
	t.Helper()
	if opts.Cluster == nil {
		opts.Cluster = cluster.Shared(t)
	}
	opts.BinDir = binDir(t)
	if opts.AutoscalerConfig == nil {
		opts.AutoscalerConfig = kpaConfig
	}
	opts.Log = testWriter{t}
	opts.KeepLogs = keepLogs
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := system.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start system: %v", err)
	}
	if keepLogs {
		t.Logf("service logs kept in %s", s.LogDir)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range s.Procs() {
				testkit.KeepLog(t, p.Name, p.LogTail(1<<20))
			}
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stop system: %v", err)
		}
	})
	return s
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func init() {
	// Keep each process's log after a failed run for a look at the whole
	// of it: TIDAL_E2E_KEEP_LOGS=1.
	if os.Getenv("TIDAL_E2E_KEEP_LOGS") != "" {
		keepLogs = true
	}
}

var keepLogs bool
