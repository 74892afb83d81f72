package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// findPID finds the process whose command line holds arg (a service's
// unique --grpc-addr value), since test/system keeps its PIDs to itself.
func findPID(arg string) (int, error) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if string(a) == arg {
				return strconv.Atoi(filepath.Base(d))
			}
		}
	}
	return 0, fmt.Errorf("no process has %q on its command line", arg)
}

// findPIDs finds every process whose command line holds sub.
func findPIDs(sub string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(sub)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processName is pid's program (programName of its command line), or "?"
// when it cannot be read.
func processName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	return programName(b)
}

// programName names the program of a NUL-separated command line: its
// executable's base name, and the first argument when that is a word (the
// control plane's multi-call binary runs as "kube kube-apiserver ...").
func programName(cmdline []byte) string {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if args[0] == "" {
		return "?"
	}
	name := filepath.Base(args[0])
	if len(args) > 1 && isWord(args[1]) {
		name += " " + args[1]
	}
	return name
}

// isWord reports whether s is a letter followed by letters, digits and
// dashes.
func isWord(s string) bool {
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || r != '-' && (r < '0' || r > '9')) {
			return false
		}
	}
	return s != ""
}

// loadAverage is the machine's 1-minute load average.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// cpuTime is a process's user plus system CPU time so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// utime and stime are fields 14 and 15 of the whole line, 12 and 13
	// after the name.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// rssBytes is a process's resident set size.
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// metricValues returns the sum of each metric of name in Prometheus text,
// grouped by the value of label (all in "" when label is empty).
func metricValues(text []byte, name, label string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		sp := strings.LastIndexByte(rest, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(rest[sp+1:], 64)
		if err != nil {
			continue
		}
		key := ""
		if label != "" {
			key = labelValue(rest[:sp], label)
		}
		out[key] += v
	}
	return out
}

// labelValue is label's value in a {a="x",b="y"} label set.
func labelValue(set, label string) string {
	i := strings.Index(set, label+`="`)
	if i < 0 || (i > 0 && set[i-1] != '{' && set[i-1] != ',') {
		return ""
	}
	v := set[i+len(label)+2:]
	if j := strings.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return ""
}

// goroutines reads go_goroutines from a service's /metrics.
func goroutines(ctx context.Context, httpAddr string) (int, error) {
	b, err := serviceMetrics(ctx, httpAddr)
	if err != nil {
		return 0, err
	}
	v, ok := metricValues(b, "go_goroutines", "")[""]
	if !ok {
		return 0, fmt.Errorf("%s/metrics: no go_goroutines", httpAddr)
	}
	return int(v), nil
}

// collectorLosses sums the collectors' scrape rounds lost and target
// scrapes skipped over the run; -1 each when one could not be read.
func collectorLosses(ctx context.Context, svcs *services) (rounds, skipped int) {
	for _, p := range svcs.Procs {
		if p.Service != "collector" {
			continue
		}
		b, err := serviceMetrics(ctx, p.HTTPAddr)
		if err != nil {
			return -1, -1
		}
		rounds += int(metricValues(b, "tidal_collector_scrape_rounds_lost_total", "")[""])
		skipped += int(metricValues(b, "tidal_collector_scrapes_skipped_total", "")[""])
	}
	return rounds, skipped
}

// serviceMetrics reads a service's /metrics.
func serviceMetrics(ctx context.Context, httpAddr string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	return io.ReadAll(resp.Body)
}

// apiRequests reads the API server's apiserver_request_total, summed by
// verb and by resource[/subresource] verb, through the admin client. A
// saturated API server can take more than 10 s to answer: it tries three
// times, 30 s each.
func apiRequests(ctx context.Context, client kubernetes.Interface) (byVerb, byResource map[string]float64, err error) {
	var b []byte
	for range 3 {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		b, err = client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(actx)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("API server metrics: %w", err)
	}
	byVerb = metricValues(b, "apiserver_request_total", "verb")
	byResource = map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "apiserver_request_total{")
		if !ok {
			continue
		}
		sp := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[sp+1:], 64)
		if sp < 0 || err != nil {
			continue
		}
		set := "{" + rest[:sp]
		res := labelValue(set, "resource")
		if sub := labelValue(set, "subresource"); sub != "" {
			res += "/" + sub
		}
		byResource[res+" "+labelValue(set, "verb")] += v
	}
	return byVerb, byResource, nil
}

// logLevels counts a JSON log's lines at level warn and error (or above).
func logLevels(path string) (warn, errs int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.Contains(line, []byte(`"level":"warn"`)):
			warn++
		case bytes.Contains(line, []byte(`"level":"error"`)), bytes.Contains(line, []byte(`"level":"dpanic"`)),
			bytes.Contains(line, []byte(`"level":"panic"`)), bytes.Contains(line, []byte(`"level":"fatal"`)):
			errs++
		}
	}
	return warn, errs, sc.Err()
}
