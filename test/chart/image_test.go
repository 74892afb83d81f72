package chart_test

import (
	"bufio"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	rel "github.com/tidalscale/tidal/test/chart/release"
)

// There is no container engine here, so the image is checked in parts: the
// Dockerfile's shape, its exact build command producing static binaries, and
// the contract between the images and the chart (user, entrypoint flags).

// dockerfile is the root Dockerfile, read once.
var dockerfile = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot(), "Dockerfile"))
	return string(b), err
})

// dockerLines returns the Dockerfile's instructions with continuation lines
// joined and comments dropped.
func dockerLines(t testing.TB) []string {
	t.Helper()
	src, err := dockerfile()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	lines := dockerLines(t)
	var stages []string
	final := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			stages = append(stages, l)
			final = i
		}
	}
	if len(stages) < 2 {
		t.Fatalf("want a multi-stage build; stages %q", stages)
	}
	base := strings.Fields(stages[len(stages)-1])[1]
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want scratch or distroless/static", base)
	}
	var user, entry string
	var copies []string
	for _, l := range lines[final:] {
		switch {
		case strings.HasPrefix(l, "USER "):
			user = strings.TrimSpace(strings.TrimPrefix(l, "USER "))
		case strings.HasPrefix(l, "ENTRYPOINT "):
			entry = l
		case strings.HasPrefix(l, "COPY "), strings.HasPrefix(l, "ADD "):
			copies = append(copies, l)
		case strings.HasPrefix(l, "RUN "):
			t.Errorf("final stage runs %q: a distroless image has no shell", l)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.Atoi(uid)
	if err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root user (runAsNonRoot needs a number)", user)
	}
	if want := chartRunAsUser(t); n != want {
		t.Errorf("USER %d, chart podSecurityContext.runAsUser %d: want the same", n, want)
	}
	if entry == "" {
		t.Errorf("final stage has no ENTRYPOINT")
	}
	if len(copies) != 1 || !strings.Contains(copies[0], "--from=build") {
		t.Errorf("final stage copies %q: want only the binary from the build stage", copies)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return l == "ARG SERVICE" }) {
		t.Errorf("no build argument SERVICE")
	}
	// The SERVICE check names exactly the three services.
	guard := regexp.MustCompile(`(\w+)\|(\w+)\|(\w+)\)`)
	found := false
	for _, l := range lines {
		if m := guard.FindStringSubmatch(l); m != nil {
			found = true
			if got := m[1:]; !slices.Equal(got, components) {
				t.Errorf("SERVICE check accepts %v, want %v", got, components)
			}
		}
	}
	if !found {
		t.Errorf("the build stage does not check SERVICE")
	}
}

func chartRunAsUser(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		PodSecurityContext struct {
			RunAsUser int `json:"runAsUser"`
		} `json:"podSecurityContext"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v.PodSecurityContext.RunAsUser
}

// buildCommand is the Dockerfile's go build: its environment and its
// arguments up to -o.
func buildCommand(t testing.TB) (env, args []string) {
	t.Helper()
	for _, l := range dockerLines(t) {
		i := strings.Index(l, "go build ")
		if !strings.HasPrefix(l, "RUN ") || i < 0 {
			continue
		}
		for _, f := range strings.Fields(l[:i]) {
			if k, v, ok := strings.Cut(f, "="); ok && strings.ToUpper(k) == k && !strings.HasPrefix(f, "--") {
				env = append(env, k+"="+v)
			}
		}
		rest := l[i+len("go build "):]
		o := strings.Index(rest, " -o ")
		if o < 0 {
			t.Fatalf("Dockerfile go build has no -o: %q", l)
		}
		// Split like a shell, for the one quoted -ldflags value.
		for _, f := range regexp.MustCompile(`[^\s"]+(?:"[^"]*")?`).FindAllString(rest[:o], -1) {
			args = append(args, strings.ReplaceAll(f, `"`, ""))
		}
		return env, args
	}
	t.Fatal("Dockerfile has no RUN ... go build")
	return nil, nil
}

// buildOnce holds the three services built with the Dockerfile's own
// command (for this machine's architecture), once per test binary.
var buildOnce struct {
	sync.Once
	bins map[string]string
	err  error
}

func serviceBinaries(t testing.TB) map[string]string {
	t.Helper()
	env, args := buildCommand(t)
	buildOnce.Do(func() {
		// TARGETOS and TARGETARCH are build arguments; build for this
		// machine so the binaries can run here.
		var buildEnv []string
		for _, e := range env {
			buildEnv = append(buildEnv, targetArg.ReplaceAllStringFunc(e, func(m string) string {
				if strings.Contains(m, "TARGETOS") {
					return "linux"
				}
				return goarch()
			}))
		}
		bins := map[string]string{}
		for _, svc := range components {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			out, err := rel.GoBuild(ctx, repoRoot(), "tidal-"+svc+"-image", "./services/"+svc, buildEnv, args...)
			cancel()
			if err != nil {
				buildOnce.err = err
				return
			}
			bins[svc] = out
		}
		buildOnce.bins = bins
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.bins
}

// targetArg is a use of BuildKit's TARGETOS or TARGETARCH, with or without
// a shell default.
var targetArg = regexp.MustCompile(`\$\{TARGET(OS|ARCH)(:-[^}]*)?\}`)

func goarch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		return "amd64"
	}
	return strings.TrimSpace(string(out))
}

// TestImageBinariesStatic builds each service as the Dockerfile does and
// checks the result needs no dynamic loader or shared library: it runs on
// distroless/static (or scratch).
func TestImageBinariesStatic(t *testing.T) {
	t.Parallel()
	env, _ := buildCommand(t)
	if !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("Dockerfile go build env %v: want CGO_ENABLED=0", env)
	}
	for svc, bin := range serviceBinaries(t) {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("tidal-%s has a dynamic loader (PT_INTERP): not static", svc)
			}
		}
		if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
			t.Errorf("tidal-%s needs shared libraries %v", svc, libs)
		}
		f.Close()
	}
}

// TestChartFlagsExist proves every TIDAL_ variable and argument the chart
// gives a service names a flag that service's binary defines, for every
// scenario: a renamed flag cannot silently fall back to its default.
func TestChartFlagsExist(t *testing.T) {
	t.Parallel()
	bins := serviceBinaries(t)
	flags := map[string]map[string]bool{}
	for svc, bin := range bins {
		flags[svc] = binaryFlags(t, bin)
		if !flags[svc]["grpc-addr"] {
			t.Fatalf("tidal-%s -h lists no --grpc-addr; flags parsed: %v", svc, flags[svc])
		}
	}
	for _, sc := range scenarios {
		m := manifest(render(t, sc.release))
		for _, svc := range components {
			dep := typed[appsv1.Deployment](t, m.get(t, "Deployment", sc.fullname+"-"+svc))
			ctr := dep.Spec.Template.Spec.Containers[0]
			var used []string
			for _, e := range ctr.Env {
				if name, ok := strings.CutPrefix(e.Name, "TIDAL_"); ok {
					used = append(used, strings.ToLower(strings.ReplaceAll(name, "_", "-")))
				}
			}
			for _, a := range ctr.Args {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				used = append(used, name)
			}
			for _, f := range used {
				if !flags[svc][f] {
					t.Errorf("%s: chart sets --%s (TIDAL_%s) but tidal-%s has no such flag",
						sc.name, f, strings.ToUpper(strings.ReplaceAll(f, "-", "_")), svc)
				}
			}
		}
	}
}

// binaryFlags runs bin -h and collects the flag names flag.PrintDefaults
// lists.
func binaryFlags(t testing.TB, bin string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// -h makes the flag package print every flag; the exit status is that
	// of a refused flag, so it is not checked.
	out, _ := exec.CommandContext(ctx, bin, "-h").CombinedOutput()
	names := map[string]bool{}
	re := regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`)
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		names[m[1]] = true
	}
	return names
}

// TestImageNamesMatchChart checks hack/image-build.sh tags the images where
// the chart's default values look for them.
func TestImageNamesMatchChart(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "hack", "image-build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	m := regexp.MustCompile(`REGISTRY=\$\{REGISTRY:-([^}]+)\}`).FindStringSubmatch(script)
	if m == nil {
		t.Fatal("hack/image-build.sh has no REGISTRY default")
	}
	if !strings.Contains(script, `ref="$REGISTRY/tidal-$svc:$TAG"`) {
		t.Errorf("hack/image-build.sh does not tag REGISTRY/tidal-SERVICE:TAG")
	}
	defaults := manifest(render(t, scenarios[0].release))
	for _, svc := range components {
		dep := typed[appsv1.Deployment](t, defaults.get(t, "Deployment", "tidal-"+svc))
		want := m[1] + "/tidal-" + svc + ":"
		if got := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(got, want) {
			t.Errorf("chart image %q, want the one make image builds, %s<tag>", got, want)
		}
	}
}
