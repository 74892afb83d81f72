package server

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/services/server/servertest"
)

// The identities of the policy tests: the defaults of a release "tidal" in
// namespace "tidal", and callers with no role.
var (
	idCollector = identity.MustNew("cluster.local", "tidal", "tidal-collector")
	idDecider   = identity.MustNew("cluster.local", "tidal", "tidal-decider")
	idActuator  = identity.MustNew("cluster.local", "tidal", "tidal-actuator")
	idPusher    = identity.MustNew("cluster.local", "knative-serving", "activator")
	idOperator  = identity.MustNew("cluster.local", "ops", "oncall")
	idKEDA      = identity.MustNew("cluster.local", "keda", "keda-operator")
	idStranger  = identity.MustNew("cluster.local", "default", "web")
	idForeign   = identity.MustNew("other.example", "tidal", "tidal-decider")
	idDeployer  = identity.MustNew("cluster.local", "ci", "riff")
	idReader    = identity.MustNew("cluster.local", "ops", "dashboard")
	// idTenant holds no role and is bound to team-a by --authz-namespaces;
	// idStranger is bound to its own namespace, default, by no flag.
	idTenant = identity.MustNew("cluster.local", "team-a", "grpcurl")
	// idTenantOperator is an operator bound to team-a.
	idTenantOperator = identity.MustNew("cluster.local", "team-a", "oncall")
)

// callers name the identities of the matrix; "no identity" is a verified
// certificate without a SPIFFE ID.
var callers = []struct {
	name string
	id   identity.ID
}{
	{"collector", idCollector}, {"decider", idDecider}, {"actuator", idActuator},
	{"pusher", idPusher}, {"operator", idOperator}, {"keda", idKEDA}, {"stranger", idStranger},
	{"foreign", idForeign}, {"no identity", identity.ID{}}, {"deployer", idDeployer}, {"reader", idReader},
	{"tenant", idTenant}, {"tenant operator", idTenantOperator},
}

// readers are the callers any read is open to (within their namespaces).
var readers = []string{"collector", "decider", "actuator", "pusher", "operator", "keda", "stranger", "deployer", "reader", "tenant", "tenant operator"}

// scoped are the callers bound to namespaces, and to which: every
// namespace a request of theirs names must be one of them.
var scoped = map[string][]string{
	"stranger": {"default"}, "tenant": {"team-a"}, "tenant operator": {"team-a"},
}

// services are the roles of tidal's own services, whose reads have no budget.
var services = []string{"collector", "decider", "actuator"}

// wantAllowed is the policy the issue asks for, method by method, written
// out apart from the code's table so that a change to either shows here.
// Every method tidal's binaries serve (read from the registered service
// descriptors, and every service of proto/) must have a row
// (TestMatrixCoversEveryMethod).
var wantAllowed = servertest.Allowed(readers)

// testAuthz is the configuration of the matrix: the defaults, plus the
// pusher, the operators, KEDA, the deployer, the reader and the tenants'
// bindings.
func testAuthz(t *testing.T, args ...string) *AuthzConfig {
	t.Helper()
	var c AuthzConfig
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	base := []string{"--authz-pushers", idPusher.String(), "--authz-operators", idOperator.String() + "," + idTenantOperator.String(),
		"--authz-keda", idKEDA.String(), "--authz-deployers", idDeployer.String(), "--authz-readers", idReader.String(),
		"--authz-namespaces", idTenant.String() + "=team-a;" + idTenantOperator.String() + "=team-a"}
	if err := fs.Parse(append(base, args...)); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestPolicyMatrix(t *testing.T) {
	p := testAuthz(t).policy
	for method, allowed := range wantAllowed {
		for _, c := range callers {
			want := contains(allowed, c.name)
			var idErr error
			if c.id.IsZero() {
				idErr = identity.ErrNoIdentity
			}
			d := p.decide(method, c.id, idErr)
			if d.allowed != want {
				t.Errorf("%s by %s: allowed = %v (%s), want %v", method, c.name, d.allowed, d.reason, want)
			}
			if !d.allowed && d.reason == "" {
				t.Errorf("%s by %s: refused without a reason", method, c.name)
			}
			// Everything that passes is rate limited, but reads of tidal's
			// own services; reads count against the read budget.
			isRead := len(allowed) == len(readers)
			unlimited := isRead && contains(services, c.name)
			if d.allowed && (d.limited == unlimited || d.read != isRead) {
				t.Errorf("%s by %s: limited = %v, read = %v", method, c.name, d.limited, d.read)
			}
			if d.allowed {
				var want []string
				for ns := range d.scope {
					want = append(want, ns)
				}
				slices.Sort(want)
				if got := scoped[c.name]; (d.scope == nil) != (got == nil) || !slices.Equal(want, got) {
					t.Errorf("%s by %s: scope %v, want %v (nil: every namespace)", method, c.name, d.scope, got)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestPolicyLabels(t *testing.T) {
	p := testAuthz(t).policy
	for _, tt := range []struct {
		id    identity.ID
		idErr error
		want  string
	}{
		{idCollector, nil, "collector"},
		{idDecider, nil, "decider"},
		{idPusher, nil, "pusher"},
		{idOperator, nil, "operator"},
		{idKEDA, nil, "keda"},
		{idStranger, nil, "other"},
		{idDeployer, nil, "deployer"},
		{idReader, nil, "reader"},
		{idForeign, nil, "unknown"},
		{identity.ID{}, identity.ErrNoIdentity, "unknown"},
	} {
		if got := p.decide("/tidal.actuator.v1.ActuatorService/Scale", tt.id, tt.idErr).label; got != tt.want {
			t.Errorf("label of %s = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestPolicyUnknownMethodClosed(t *testing.T) {
	p := testAuthz(t, "--authz-allow", "/tidal.actuator.v1.ActuatorService/Evict="+idStranger.String()).policy
	for _, m := range []string{"/tidal.actuator.v1.ActuatorService/Evict", "/tidal.decider.v1.DeciderService/Reset", "/other.Service/Get"} {
		if d := p.decide(m, idOperator, nil); d.allowed {
			t.Errorf("%s by an operator: allowed, want refused (no rule names it)", m)
		}
	}
	if d := p.decide("/tidal.actuator.v1.ActuatorService/Evict", idStranger, nil); !d.allowed || !d.limited {
		t.Errorf("Evict by the identity a rule names: %+v, want allowed and rate limited", d)
	}
}

func TestAuthzFlags(t *testing.T) {
	custom := identity.MustNew("example.org", "prod", "tidal-all-decider")
	tests := []struct {
		name    string
		args    []string
		method  string
		id      identity.ID
		want    bool
		wantErr string
	}{
		{name: "default names from namespace and prefix", args: []string{"--authz-namespace", "prod", "--authz-account-prefix", "tidal-all", "--authz-trust-domain", "example.org"},
			method: "/tidal.actuator.v1.ActuatorService/Scale", id: custom, want: true},
		{name: "the old defaults no longer hold", args: []string{"--authz-namespace", "prod"},
			method: "/tidal.actuator.v1.ActuatorService/Scale", id: idDecider, want: false},
		{name: "explicit deciders replace the default", args: []string{"--authz-deciders", custom.String()},
			method: "/tidal.actuator.v1.ActuatorService/Scale", id: idDecider, want: false},
		{name: "explicit decider of another trust domain", args: []string{"--authz-deciders", custom.String()},
			method: "/tidal.actuator.v1.ActuatorService/Scale", id: custom, want: true},
		{name: "deciders may not deploy", args: []string{"--authz-deciders", custom.String()},
			method: "/tidal.actuator.v1.ActuatorService/Deploy", id: custom, want: false},
		{name: "deployers may not scale", method: "/tidal.actuator.v1.ActuatorService/Scale", id: idDeployer, want: false},
		{name: "bad binding", args: []string{"--authz-namespaces", idTenant.String() + "=a/b"}, wantErr: "namespace"},
		{name: "negative read rate", args: []string{"--authz-read-rate", "-1"}, wantErr: "--authz-read-rate"},
		{name: "read rate without burst", args: []string{"--authz-read-burst", "0"}, wantErr: "--authz-read-burst"},
		{name: "negative namespace read rate", args: []string{"--authz-namespace-read-rate", "-1"}, wantErr: "--authz-namespace-read-rate"},
		{name: "namespace read rate without burst", args: []string{"--authz-namespace-read-burst", "0"}, wantErr: "--authz-namespace-read-burst"},
		{name: "negative watches per caller", args: []string{"--authz-namespace-watches-per-caller", "-1"}, wantErr: "--authz-namespace-watches-per-caller"},
		{name: "negative namespace mutating rate", args: []string{"--authz-namespace-mutating-rate", "-1"}, wantErr: "--authz-namespace-mutating-rate"},
		{name: "namespace mutating rate without burst", args: []string{"--authz-namespace-mutating-burst", "0"}, wantErr: "--authz-namespace-mutating-burst"},
		{name: "negative watches", args: []string{"--authz-namespace-watches", "-1"}, wantErr: "--authz-namespace-watches"},
		{name: "allow rule by prefix", args: []string{"--authz-allow", "tidal.decider.v1.DeciderService/=" + idStranger.String()},
			method: "/tidal.decider.v1.DeciderService/Ingest", id: idStranger, want: true},
		{name: "allow rules separated by ;", args: []string{"--authz-allow", "/a/=" + idPusher.String() + ";/tidal.actuator.v1.ActuatorService/Scale=" + idStranger.String() + "," + idCollector.String()},
			method: "/tidal.actuator.v1.ActuatorService/Scale", id: idCollector, want: true},
		{name: "malformed ID", args: []string{"--authz-operators", "spiffe://cluster.local/ns/../x"}, wantErr: "authz-operators"},
		{name: "rule without =", args: []string{"--authz-allow", "/tidal.actuator.v1.ActuatorService/Scale"}, wantErr: "METHOD_PREFIX="},
		{name: "rule without identity", args: []string{"--authz-allow", "/x=,"}, wantErr: "no identity"},
		{name: "bad namespace", args: []string{"--authz-namespace", "a/b"}, wantErr: "--authz-namespace"},
		{name: "negative rate", args: []string{"--authz-mutating-rate", "-1"}, wantErr: "--authz-mutating-rate"},
		{name: "rate without burst", args: []string{"--authz-mutating-burst", "0"}, wantErr: "--authz-mutating-burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c AuthzConfig
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.RegisterFlags(fs)
			err := fs.Parse(tt.args)
			if err == nil {
				err = c.Validate()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.policy.decide(tt.method, tt.id, nil).allowed; got != tt.want {
				t.Errorf("%s by %s: allowed = %v, want %v", tt.method, tt.id, got, tt.want)
			}
		})
	}
}

func TestAuthzFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yamlFile := write("authz.yaml", `
pushers: [spiffe://cluster.local/ns/default/sa/web]
operators:
  - spiffe://cluster.local/ns/ops/sa/oncall
keda: [spiffe://cluster.local/ns/keda/sa/keda-metrics]
deployers: [spiffe://cluster.local/ns/ci/sa/tekton]
readers: [spiffe://cluster.local/ns/monitoring/sa/grafana]
namespaces:
  - identity: spiffe://cluster.local/ns/default/sa/web
    namespaces: [team-a, team-b]
allow:
  - method: /tidal.decider.v1.DeciderService/Ingest
    identities: [spiffe://cluster.local/ns/knative-serving/sa/activator]
`)
	jsonFile := write("authz.json", `{"deciders": ["spiffe://cluster.local/ns/default/sa/web"]}`)
	c := testAuthz(t, "--authz-file", yamlFile)
	for _, tt := range []struct {
		method string
		id     identity.ID
		want   bool
	}{
		{"/tidal.collector.v1.CollectorService/PushStats", idStranger, true},
		{"/tidal.collector.v1.CollectorService/PushStats", idPusher, true}, // the flag's still holds
		{"/tidal.actuator.v1.ActuatorService/Scale", idOperator, true},
		{"/tidal.decider.v1.DeciderService/Ingest", idPusher, true},
		{"/tidal.decider.v1.DeciderService/Ingest", idStranger, false},
		{"/tidal.decider.v1.DeciderService/Ingest", idCollector, true}, // defaults stay
		{"/externalscaler.ExternalScaler/GetMetrics", identity.MustNew("cluster.local", "keda", "keda-metrics"), true},
		{"/externalscaler.ExternalScaler/GetMetrics", idKEDA, true}, // the flag's still holds
		{"/externalscaler.ExternalScaler/GetMetrics", idStranger, false},
		{"/tidal.actuator.v1.ActuatorService/Undeploy", identity.MustNew("cluster.local", "ci", "tekton"), true},
	} {
		if got := c.policy.decide(tt.method, tt.id, nil).allowed; got != tt.want {
			t.Errorf("yaml: %s by %s: allowed = %v, want %v", tt.method, tt.id, got, tt.want)
		}
	}
	if got := c.policy.scope(identity.MustNew("cluster.local", "monitoring", "grafana"), RoleReader); got != nil {
		t.Errorf("yaml: the reader's scope is %v, want every namespace", got)
	}
	if got := c.policy.scope(idStranger, 0); len(got) != 2 || !got["team-a"] || !got["team-b"] {
		t.Errorf("yaml: the bound identity's scope is %v, want team-a and team-b", got)
	}
	c = testAuthz(t, "--authz-file", jsonFile)
	if !c.policy.decide("/tidal.actuator.v1.ActuatorService/Scale", idStranger, nil).allowed {
		t.Error("json: decider from the file refused Scale")
	}

	for name, body := range map[string]string{
		"unknown key": "pusher: [x]\n",
		"bad ID":      "operators: [spiffe://cluster.local/ns//x]\n",
		"bad rule":    "allow: [{method: /x, identities: []}]\n",
		"bad binding": "namespaces: [{identity: spiffe://cluster.local/ns/a/sa/b, namespaces: [A]}]\n",
	} {
		var c AuthzConfig
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse([]string{"--authz-file", write("bad.yaml", body)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--authz-file") {
			t.Errorf("%s: Validate = %v, want an error naming --authz-file", name, err)
		}
	}
	var missing AuthzConfig
	missing.File = filepath.Join(dir, "nope.yaml")
	if err := missing.Validate(); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestRateLimiterBounds(t *testing.T) {
	l := newRateLimiter(rate.Limit(1), 2, 3)
	now := time.Unix(1000, 0)
	for i, want := range []bool{true, true, false} {
		if got := l.allow("a", now); got != want {
			t.Errorf("call %d of a at once: %v, want %v", i+1, got, want)
		}
	}
	if !l.allow("a", now.Add(time.Second)) {
		t.Error("a refused a second later: the bucket did not refill")
	}
	if !l.allow("b", now) {
		t.Error("b refused: buckets are per identity")
	}
	for _, k := range []string{"c", "d", "e"} {
		l.allow(k, now)
	}
	if got := l.len(); got != 3 {
		t.Errorf("tracked identities = %d, want the bound 3", got)
	}
}

func TestWatchCountsBounds(t *testing.T) {
	w := newWatchCounts(0, 0, 2)
	ra, err := w.acquire("a", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.acquire("a", "team-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.acquire("a", "team-c"); err == nil || !strings.Contains(err.Error(), "2 namespaces") {
		t.Errorf("a watch of a third namespace with 2 tracked: %v, want it refused", err)
	}
	if _, err := w.acquire("a", "team-a"); err != nil {
		t.Errorf("another watch of a tracked namespace: %v, want it through (no count bound)", err)
	}
	ra()
	ra() // a second release frees nothing more
	if got := w.byNamespace["team-a"]; got != 1 {
		t.Errorf("team-a's count after one of two watches ended, released twice: %d, want 1", got)
	}
	if _, err := w.acquire("b", "team-c"); err == nil {
		t.Error("a third namespace while two are still watched: allowed, want refused")
	}
}
