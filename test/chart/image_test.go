package chart_test

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/hack/imagebuild"
	rel "github.com/tidalscale/tidal/test/chart/release"
)

// The images themselves are built and checked in test/image (ko, through
// hack/imagebuild). Here the services are built for this machine with ko's
// own flags from .ko.yaml, and checked against the chart: static binaries,
// and every flag the chart sets defined.

// buildCommand is the go build environment and flags ko uses for the
// images: CGO off, -trimpath (ko adds it), .ko.yaml's defaultEnv and
// defaultLdflags.
func buildCommand(t testing.TB) (env, args []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), ".ko.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		DefaultEnv     []string `json:"defaultEnv"`
		DefaultFlags   []string `json:"defaultFlags"`
		DefaultLdflags []string `json:"defaultLdflags"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf(".ko.yaml: %v", err)
	}
	// ko's defaults: CGO_ENABLED=0 first, so .ko.yaml may override it.
	env = append([]string{"CGO_ENABLED=0"}, cfg.DefaultEnv...)
	args = append(append([]string{}, cfg.DefaultFlags...), "-trimpath")
	if len(cfg.DefaultLdflags) > 0 {
		args = append(args, "-ldflags="+strings.Join(cfg.DefaultLdflags, " "))
	}
	return env, args
}

// buildOnce holds the three services built with ko's flags (for this
// machine's architecture), once per test binary.
var buildOnce struct {
	sync.Once
	bins map[string]string
	err  error
}

func serviceBinaries(t testing.TB) map[string]string {
	t.Helper()
	env, args := buildCommand(t)
	buildOnce.Do(func() {
		bins := map[string]string{}
		for _, svc := range components {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			out, err := rel.GoBuild(ctx, repoRoot(), "tidal-"+svc+"-image", "./services/"+svc, env, args...)
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

// TestImageBinariesStatic builds each service as ko does for the images and
// checks the result needs no dynamic loader or shared library: it runs on
// the images' static base (or distroless/static).
func TestImageBinariesStatic(t *testing.T) {
	t.Parallel()
	env, _ := buildCommand(t)
	// The last setting wins, as in ko's and exec's environment.
	cgo := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "CGO_ENABLED="); ok {
			cgo = v
		}
	}
	if cgo != "0" {
		t.Errorf("ko build env %v: want CGO_ENABLED=0", env)
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

// TestImageNamesMatchChart checks make image names the images where the
// chart's default values look for them.
func TestImageNamesMatchChart(t *testing.T) {
	t.Parallel()
	if !slices.Equal(imagebuild.Services, components) {
		t.Errorf("make image builds %v, the chart runs %v", imagebuild.Services, components)
	}
	defaults := manifest(render(t, scenarios[0].release))
	for _, svc := range components {
		dep := typed[appsv1.Deployment](t, defaults.get(t, "Deployment", "tidal-"+svc))
		want := imagebuild.DefaultRegistry + "/tidal-" + svc + ":"
		if got := dep.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(got, want) {
			t.Errorf("chart image %q, want the one make image builds, %s<tag>", got, want)
		}
	}
}
