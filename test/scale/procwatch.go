package scale

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
)

// procWatch measures the service processes over the steady phase: CPU from
// /proc/PID/stat, RSS from /proc/PID/status, goroutines from each one's
// /metrics, and the API server's requests from its /metrics.
type procWatch struct {
	procs []watched
	// groups are other processes on the machine whose CPU the report gives
	// for context: this process (the simulated pods and the informers) and
	// the control plane.
	groups []cpuGroup
	// load is the 1-minute load average at the start and the end.
	load0, load1 string

	t0, t1     time.Time
	api0, api1 map[string]float64 // by verb
	res0, res1 map[string]float64 // by "resource[/subresource] verb"
	apiErr     error              // why the counts could not be read

	// mu guards the samples in procs.
	mu sync.Mutex
}

// byProgram groups pids by their program (processName), in
// order of name.
func byProgram(prefix string, pids []int) []cpuGroup {
	idx := map[string]int{}
	var out []cpuGroup
	for _, pid := range pids {
		name := processName(pid)
		i, ok := idx[name]
		if !ok {
			i = len(out)
			idx[name] = i
			out = append(out, cpuGroup{name: prefix + name})
		}
		out[i].pids = append(out[i].pids, pid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

type cpuGroup struct {
	name       string
	pids       []int
	cpu0, cpu1 time.Duration
}

func (g *cpuGroup) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range g.pids {
		if d, err := cpuTime(pid); err == nil {
			sum += d
		}
	}
	return sum
}

type watched struct {
	p                    serviceProc
	pid                  int
	cpu0, cpu1           time.Duration
	rss, maxRSS          int64
	goroutines, maxGorou int
}

func newProcWatch(s *services, clusterDir string) (*procWatch, error) {
	w := &procWatch{}
	svc := map[int]bool{}
	for _, p := range s.Procs {
		pid, err := findPID(p.GRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		w.procs = append(w.procs, watched{p: p, pid: pid})
		svc[pid] = true
	}
	// The services that talk to the API server name a kubeconfig in the
	// cluster's directory too; they are reported on their own.
	var cp []int
	for _, pid := range findPIDs(clusterDir) {
		if !svc[pid] {
			cp = append(cp, pid)
		}
	}
	w.groups = []cpuGroup{
		{name: "harness (simulated pods, informers)", pids: []int{os.Getpid()}},
		{name: "control plane (etcd, API server, controllers, kwok)", pids: cp},
	}
	// The control plane again by program, to tell which part of it a run
	// starves the services with.
	w.groups = append(w.groups, byProgram("control plane: ", cp)...)
	return w, nil
}

func (w *procWatch) begin(ctx context.Context, client kubernetes.Interface) error {
	var err error
	// Without the request counts the report says so; the rest still holds.
	w.api0, w.res0, w.apiErr = apiRequests(ctx, client)
	w.t0 = time.Now()
	w.load0 = loadAverage()
	for i := range w.groups {
		w.groups[i].cpu0 = w.groups[i].cpu()
	}
	for i := range w.procs {
		if w.procs[i].cpu0, err = cpuTime(w.procs[i].pid); err != nil {
			return fmt.Errorf("%s: %w", w.procs[i].p.Name, err)
		}
	}
	return nil
}

func (w *procWatch) end(ctx context.Context, client kubernetes.Interface) error {
	var err error
	w.t1 = time.Now()
	w.load1 = loadAverage()
	for i := range w.groups {
		w.groups[i].cpu1 = w.groups[i].cpu()
	}
	for i := range w.procs {
		if w.procs[i].cpu1, err = cpuTime(w.procs[i].pid); err != nil {
			return fmt.Errorf("%s: %w", w.procs[i].p.Name, err)
		}
	}
	w.look(ctx)
	if w.apiErr == nil {
		w.api1, w.res1, w.apiErr = apiRequests(ctx, client)
	}
	return nil
}

// look samples RSS and goroutines once.
func (w *procWatch) look(ctx context.Context) {
	for i := range w.procs {
		p := &w.procs[i]
		rss, err1 := rssBytes(p.pid)
		g, err2 := goroutines(ctx, p.p.HTTPAddr)
		w.mu.Lock()
		if err1 == nil {
			p.rss, p.maxRSS = rss, max(p.maxRSS, rss)
		}
		if err2 == nil {
			p.goroutines, p.maxGorou = g, max(p.maxGorou, g)
		}
		w.mu.Unlock()
	}
}

// sample looks every interval until ctx ends, logging progress every 30 s.
func (w *procWatch) sample(ctx context.Context, every time.Duration, logf func(string, ...any), rec *recorder, farm *podFarm) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastLog := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.look(ctx)
		if time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			kpa, _ := rec.undecided()
			res := rec.results(time.Now())
			n, lost := 0, 0
			for _, r := range res {
				if !r.already {
					n++
					if r.firstMove.IsZero() {
						lost++
					}
				}
			}
			logf("%d pods served, %d load changes so far (%d not applied yet), %d KPA targets still without a decision", farm.Pods(), n, lost, kpa)
		}
	}
}

// ProcReport is one service process's cost over the steady phase.
type ProcReport struct {
	Name, Service string
	// CPUCores is the mean CPU use over the steady phase.
	CPUCores float64
	// RSSMiB and MaxRSSMiB are the resident set at the end and the most
	// seen (sampled every 5 s), in MiB.
	RSSMiB, MaxRSSMiB float64
	// Goroutines and MaxGoroutines are go_goroutines at the end and the most
	// seen.
	Goroutines, MaxGoroutines int
	// Warnings and Errors count its log lines at those levels over the whole
	// run.
	Warnings, Errors int
}

func (w *procWatch) report(s *services) []ProcReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ProcReport
	secs := w.t1.Sub(w.t0).Seconds()
	for _, p := range w.procs {
		r := ProcReport{
			Name: p.p.Name, Service: p.p.Service,
			CPUCores: (p.cpu1 - p.cpu0).Seconds() / secs,
			RSSMiB:   float64(p.rss) / (1 << 20), MaxRSSMiB: float64(p.maxRSS) / (1 << 20),
			Goroutines: p.goroutines, MaxGoroutines: p.maxGorou,
		}
		r.Warnings, r.Errors, _ = logLevels(s.logPath(p.p))
		out = append(out, r)
	}
	order := map[string]int{"collector": 0, "decider": 1, "actuator": 2}
	sort.SliceStable(out, func(i, j int) bool { return order[out[i].Service] < order[out[j].Service] })
	return out
}

// others are the CPU cores of the other groups over the steady phase.
func (w *procWatch) others() []Rate {
	secs := w.t1.Sub(w.t0).Seconds()
	var out []Rate
	for _, g := range w.groups {
		out = append(out, Rate{g.name, (g.cpu1 - g.cpu0).Seconds() / secs})
	}
	return out
}

// Rate is a count per second over the steady phase.
type Rate struct {
	Key    string
	PerSec float64
}

// requests are the API server's requests per second by verb and the ten
// busiest resource and verb pairs, over the steady phase.
func (w *procWatch) requests() (byVerb, byResource []Rate, err error) {
	if w.apiErr != nil {
		return nil, nil, w.apiErr
	}
	secs := w.t1.Sub(w.t0).Seconds()
	rates := func(a, b map[string]float64) []Rate {
		var out []Rate
		for k, v := range b {
			if d := v - a[k]; d > 0 {
				out = append(out, Rate{k, d / secs})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].PerSec > out[j].PerSec })
		return out
	}
	byVerb, byResource = rates(w.api0, w.api1), rates(w.res0, w.res1)
	if len(byResource) > 10 {
		byResource = byResource[:10]
	}
	return byVerb, byResource, nil
}
