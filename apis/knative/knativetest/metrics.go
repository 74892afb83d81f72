package knativetest

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/otlptranslator"
)

// Metric is one metric family Knative Serving's autoscaler exports, as
// Prometheus scrapes it.
type Metric struct {
	// Name is the family's name after the exporter's translation.
	Name string
	// OTelName and Unit are the instrument's name and unit in Knative's
	// source.
	OTelName, Unit string
	Help           string
	Type           dto.MetricType
	// Labels are the series' label names, sorted, the exporter's scope
	// labels among them.
	Labels []string
	// Scope is the instrumentation scope (the otel_scope_name label).
	Scope string
	// Buckets are a histogram's upper bounds.
	Buckets []float64
	// File is the source file defining the instrument, in the module.
	File string
}

// autoscalerSources are the files of knative.dev/serving v0.50.0 that
// define the instruments the autoscaler binary (cmd/autoscaler) records,
// each with the file holding the one attribute.NewSet its series carry.
var autoscalerSources = []struct{ instruments, attributes string }{
	// The deciders' values; the attributes are built in
	// cmd/autoscaler/main.go's uniScalerFactoryFunc.
	{"pkg/autoscaler/scaling/metrics.go", "cmd/autoscaler/main.go"},
	// The KPA reconciler's pod counts (its reportMetrics).
	{"pkg/reconciler/autoscaling/kpa/metrics.go", "pkg/reconciler/autoscaling/kpa/kpa.go"},
	// The scraper's duration (newServiceScraperWithClient).
	{"pkg/autoscaler/metrics/stats_scraper.go", "pkg/autoscaler/metrics/stats_scraper.go"},
}

// The Prometheus exporter knative.dev/pkg's observability/metrics sets up
// (buildPrometheus: go.opentelemetry.io/otel/exporters/prometheus v0.66.0
// with otlptranslator.UnderscoreEscapingWithSuffixes) puts the scope in
// these labels (its exporter.go), and no resource attributes.
var scopeLabels = []string{"otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}

// semconvKeys are the attribute keys of the OpenTelemetry semantic
// conventions Knative's source names through knative.dev/pkg's
// observability/semconv (which re-exports go.opentelemetry.io/otel/semconv).
var semconvKeys = map[string]string{"K8SNamespaceName": "k8s.namespace.name"}

// AutoscalerMetrics reads, from knative.dev/serving v0.50.0's source in the
// module cache, every metric family its autoscaler exports through
// Prometheus: each instrument's name, description, unit and kind, its
// package's scope, and the attributes its series carry, translated as the
// exporter knative.dev/pkg configures translates them.
func AutoscalerMetrics(ctx context.Context) ([]Metric, error) {
	dir, err := moduleDir(ctx, "knative.dev/serving")
	if err != nil {
		return nil, err
	}
	keys, err := attributeKeys(filepath.Join(dir, "pkg", "metrics", "key.go"))
	if err != nil {
		return nil, err
	}
	namer := otlptranslator.NewMetricNamer("", otlptranslator.UnderscoreEscapingWithSuffixes)
	labeler := otlptranslator.LabelNamer{UTF8Allowed: false}
	var out []Metric
	for _, src := range autoscalerSources {
		attrs, err := attributeSet(filepath.Join(dir, src.attributes), keys)
		if err != nil {
			return nil, err
		}
		labels := slices.Clone(scopeLabels)
		for _, a := range attrs {
			l, err := labeler.Build(a)
			if err != nil {
				return nil, fmt.Errorf("%s: attribute %q: %w", src.attributes, a, err)
			}
			labels = append(labels, l)
		}
		slices.Sort(labels)
		ms, err := instruments(filepath.Join(dir, src.instruments))
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			m.File = src.instruments
			m.Labels = labels
			kind := map[dto.MetricType]otlptranslator.MetricType{
				dto.MetricType_GAUGE:     otlptranslator.MetricTypeGauge,
				dto.MetricType_COUNTER:   otlptranslator.MetricTypeMonotonicCounter,
				dto.MetricType_HISTOGRAM: otlptranslator.MetricTypeHistogram,
			}[m.Type]
			if m.Name, err = namer.Build(otlptranslator.Metric{Name: m.OTelName, Unit: m.Unit, Type: kind}); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", src.instruments, m.OTelName, err)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// instrumentKinds are the meter methods by the Prometheus type the exporter
// gives their data (an up-down counter is not monotonic: a gauge).
var instrumentKinds = map[string]dto.MetricType{
	"Int64ObservableGauge": dto.MetricType_GAUGE, "Float64ObservableGauge": dto.MetricType_GAUGE,
	"Int64Gauge": dto.MetricType_GAUGE, "Float64Gauge": dto.MetricType_GAUGE,
	"Int64UpDownCounter": dto.MetricType_GAUGE, "Float64UpDownCounter": dto.MetricType_GAUGE,
	"Int64ObservableUpDownCounter": dto.MetricType_GAUGE, "Float64ObservableUpDownCounter": dto.MetricType_GAUGE,
	"Int64Counter": dto.MetricType_COUNTER, "Float64Counter": dto.MetricType_COUNTER,
	"Int64ObservableCounter": dto.MetricType_COUNTER, "Float64ObservableCounter": dto.MetricType_COUNTER,
	"Int64Histogram": dto.MetricType_HISTOGRAM, "Float64Histogram": dto.MetricType_HISTOGRAM,
}

// instruments reads the instruments file defines: every call of a meter
// method with a literal name, its WithDescription, WithUnit and
// WithExplicitBucketBoundaries options, and the scope of the file's
// Meter call, resolving names declared in the file's package.
func instruments(file string) ([]Metric, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	pkg, err := packageValues(filepath.Dir(file))
	if err != nil {
		return nil, err
	}
	var out []Metric
	var scopes []string
	var bad error
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || bad != nil {
			return bad == nil
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if sel.Sel.Name == "Meter" && len(call.Args) == 1 {
			s, err := stringOf(call.Args[0], pkg)
			if err != nil {
				bad = fmt.Errorf("%s: Meter: %w", fset.Position(call.Pos()), err)
				return false
			}
			scopes = append(scopes, s)
			return true
		}
		typ, ok := instrumentKinds[sel.Sel.Name]
		if !ok || len(call.Args) == 0 {
			return true
		}
		m := Metric{Type: typ}
		if m.OTelName, err = stringOf(call.Args[0], pkg); err != nil {
			bad = fmt.Errorf("%s: %s: %w", fset.Position(call.Pos()), sel.Sel.Name, err)
			return false
		}
		for _, a := range call.Args[1:] {
			oc, ok := a.(*ast.CallExpr)
			if !ok || len(oc.Args) != 1 {
				continue
			}
			opt, ok := oc.Fun.(*ast.SelectorExpr)
			if !ok {
				continue
			}
			switch opt.Sel.Name {
			case "WithDescription":
				m.Help, err = stringOf(oc.Args[0], pkg)
			case "WithUnit":
				m.Unit, err = stringOf(oc.Args[0], pkg)
			case "WithExplicitBucketBoundaries":
				m.Buckets, err = floatsOf(oc.Args[0], pkg)
			}
			if err != nil {
				bad = fmt.Errorf("%s: %s: %s: %w", fset.Position(oc.Pos()), m.OTelName, opt.Sel.Name, err)
				return false
			}
		}
		out = append(out, m)
		return true
	})
	if bad != nil {
		return nil, bad
	}
	if len(out) == 0 || len(slices.Compact(slices.Sorted(slices.Values(scopes)))) != 1 {
		return nil, fmt.Errorf("%s: %d instruments, scopes %q: want some, under one scope", file, len(out), scopes)
	}
	for i := range out {
		out[i].Scope = scopes[0]
	}
	return out, nil
}

// attributeSet reads the keys of the one attribute.NewSet call of file, each
// argument a KEY.With(...) of knative.dev/serving's pkg/metrics or a
// semconv constructor.
func attributeSet(file string, keys map[string]string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	var sets [][]string
	var bad error
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || bad != nil || !isSelector(call.Fun, "attribute", "NewSet") {
			return bad == nil
		}
		var set []string
		for _, a := range call.Args {
			ac, ok := a.(*ast.CallExpr)
			if !ok {
				bad = fmt.Errorf("%s: attribute.NewSet argument is no call", fset.Position(a.Pos()))
				return false
			}
			fn, _ := ac.Fun.(*ast.SelectorExpr)
			switch {
			case fn != nil && fn.Sel.Name == "With":
				k, _ := fn.X.(*ast.SelectorExpr)
				if k == nil || keys[k.Sel.Name] == "" {
					bad = fmt.Errorf("%s: attribute key not in pkg/metrics", fset.Position(a.Pos()))
					return false
				}
				set = append(set, keys[k.Sel.Name])
			case fn != nil && isSelector(fn, "semconv", fn.Sel.Name) && semconvKeys[fn.Sel.Name] != "":
				set = append(set, semconvKeys[fn.Sel.Name])
			default:
				bad = fmt.Errorf("%s: attribute.NewSet argument not understood", fset.Position(a.Pos()))
				return false
			}
		}
		sets = append(sets, set)
		return true
	})
	if bad != nil {
		return nil, bad
	}
	if len(sets) != 1 {
		return nil, fmt.Errorf("%s: %d attribute.NewSet calls, want one", file, len(sets))
	}
	return sets[0], nil
}

// attributeKeys reads pkg/metrics/key.go's NAME = attributekey.String("key")
// declarations.
func attributeKeys(file string) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	keys := map[string]string{}
	for name, v := range values(f) {
		c, ok := v.(*ast.CallExpr)
		if ok && isSelector(c.Fun, "attributekey", "String") && len(c.Args) == 1 {
			if s, err := stringOf(c.Args[0], nil); err == nil {
				keys[name] = s
			}
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no attribute keys", file)
	}
	return keys, nil
}

// packageValues are the package-level constants and variables of the Go
// package in dir, its tests left out.
func packageValues(dir string) (map[string]ast.Expr, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]ast.Expr{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", e.Name(), err)
		}
		for k, v := range values(f) {
			out[k] = v
		}
	}
	return out, nil
}

// values are f's top-level NAME = VALUE declarations.
func values(f *ast.File) map[string]ast.Expr {
	out := map[string]ast.Expr{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST && g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					out[n.Name] = vs.Values[i]
				}
			}
		}
	}
	return out
}

func isSelector(e ast.Expr, pkg, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != name {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// stringOf is a string literal, or a package-level name bound to one.
func stringOf(e ast.Expr, pkg map[string]ast.Expr) (string, error) {
	if id, ok := e.(*ast.Ident); ok && pkg[id.Name] != nil {
		e = pkg[id.Name]
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", fmt.Errorf("%T: no string literal", e)
	}
	return strconv.Unquote(lit.Value)
}

// floatsOf is a []float64 literal, or a package-level name bound to one
// (spread as NAME...).
func floatsOf(e ast.Expr, pkg map[string]ast.Expr) ([]float64, error) {
	if id, ok := e.(*ast.Ident); ok && pkg[id.Name] != nil {
		e = pkg[id.Name]
	}
	cl, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("%T: no slice literal", e)
	}
	out := make([]float64, 0, len(cl.Elts))
	for _, el := range cl.Elts {
		lit, ok := el.(*ast.BasicLit)
		if !ok {
			return nil, fmt.Errorf("%T: no number literal", el)
		}
		v, err := strconv.ParseFloat(lit.Value, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
