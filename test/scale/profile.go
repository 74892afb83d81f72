package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
)

// profileServices takes a CPU profile of every service process, the
// harness and the API server at once over most of the steady phase (it
// must finish before the phase ends, when the services stop) and writes
// each to dir as <process>.cpu.pprof.
func profileServices(ctx context.Context, svcs *services, kube kubernetes.Interface, dir string, steady time.Duration, logf func(string, ...any)) {
	secs := int((steady - 10*time.Second) / time.Second)
	if secs < 5 {
		logf("steady phase %s too short for a CPU profile", steady)
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		logf("profiles: %v", err)
		return
	}
	var wg sync.WaitGroup
	// The harness too: its simulated pods and readers share the machine
	// with the services, and what it spends they may lack.
	wg.Go(func() {
		path := filepath.Join(dir, "harness.cpu.pprof")
		if err := profileSelf(ctx, path, time.Duration(secs)*time.Second); err != nil {
			logf("CPU profile of the harness: %v", err)
			return
		}
		logf("CPU profile of the harness over %ds: %s", secs, path)
	})
	// The API server, the largest part of the control plane's CPU: what
	// the services' requests and watches cost it.
	wg.Go(func() {
		path := filepath.Join(dir, "kube-apiserver.cpu.pprof")
		pctx, cancel := context.WithTimeout(ctx, time.Duration(secs+30)*time.Second)
		defer cancel()
		b, err := kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(secs)).DoRaw(pctx)
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		if err != nil {
			logf("CPU profile of the API server: %v", err)
			return
		}
		logf("CPU profile of the API server over %ds: %s", secs, path)
	})
	for _, p := range svcs.Procs {
		wg.Go(func() {
			path := filepath.Join(dir, p.Name+".cpu.pprof")
			if err := fetchProfile(ctx, "http://"+p.HTTPAddr+"/debug/pprof/profile?seconds="+fmt.Sprint(secs), path, time.Duration(secs+30)*time.Second); err != nil {
				logf("CPU profile of %s: %v", p.Name, err)
				return
			}
			logf("CPU profile of %s over %ds: %s", p.Name, secs, path)
			// The heap at the end of the steady phase: what holds memory
			// with every target known and measured.
			path = filepath.Join(dir, p.Name+".heap.pprof")
			if err := fetchProfile(ctx, "http://"+p.HTTPAddr+"/debug/pprof/heap?gc=1", path, 30*time.Second); err != nil {
				logf("heap profile of %s: %v", p.Name, err)
				return
			}
			logf("heap profile of %s: %s", p.Name, path)
		})
	}
	wg.Wait()
}

// profileSelf writes this process's CPU profile over d (less if ctx ends)
// to path.
func profileSelf(ctx context.Context, path string, d time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	pprof.StopCPUProfile()
	return f.Close()
}

func fetchProfile(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
