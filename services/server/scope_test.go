package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/proto/externalscaler"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

func TestScopeOfCallers(t *testing.T) {
	odd := identity.MustNew("cluster.local", "team-b", "ci")
	path, err := identity.Parse("spiffe://cluster.local/workload/batch")
	if err != nil {
		t.Fatal(err)
	}
	ruled := identity.MustNew("cluster.local", "team-c", "pusher")
	p := testAuthz(t, "--authz-namespaces", odd.String()+"=team-b,team-x", "--authz-namespaces", idOperator.String()+"=ops-a",
		"--authz-allow", "/tidal.collector.v1.CollectorService/PushStats="+ruled.String()).policy
	for _, tt := range []struct {
		name string
		id   identity.ID
		want []string // nil: every namespace
	}{
		{"a service", idDecider, nil},
		{"a role holder", idKEDA, nil},
		{"a reader", idReader, nil},
		{"an identity an allow rule names", ruled, nil},
		{"a bound role holder", idOperator, []string{"ops-a"}},
		{"no role: its ServiceAccount's namespace", idStranger, []string{"default"}},
		{"bound by the flag", odd, []string{"team-b", "team-x"}},
		{"not a ServiceAccount ID: no namespace", path, []string{}},
	} {
		got := p.scope(tt.id, p.roles[tt.id.String()])
		if (got == nil) != (tt.want == nil) || len(got) != len(tt.want) {
			t.Errorf("%s: scope %v, want %v", tt.name, got, tt.want)
			continue
		}
		for _, ns := range tt.want {
			if !got[ns] {
				t.Errorf("%s: scope %v, want %v", tt.name, got, tt.want)
			}
		}
	}
}

func TestBindingFlags(t *testing.T) {
	for _, tt := range []struct {
		arg, wantErr string
	}{
		{idTenant.String(), "want SPIFFE_ID=NAMESPACE"},
		{idTenant.String() + "=", "no namespace"},
		{idTenant.String() + "=Team_A", "namespace"},
		{"spiffe://cluster.local/ns/../x=a", "SPIFFE ID"},
		{idTenant.String() + "=" + strings.Repeat("a", 64), "at most 63"},
	} {
		var c AuthzConfig
		if err := c.Namespaces.Set(tt.arg); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("--authz-namespaces %.40q: %v, want an error containing %q", tt.arg, err, tt.wantErr)
		}
	}
}

func TestFirstOutOfScope(t *testing.T) {
	team := map[string]bool{"team-a": true}
	ref := func(ns string) *commonv1.TargetRef { return &commonv1.TargetRef{Namespace: ns, Name: "web"} }
	for _, tt := range []struct {
		name string
		msg  proto.Message
		out  string // "-": none out of scope
	}{
		{"a target in scope", &actuatorv1.ScaleRequest{Target: ref("team-a")}, "-"},
		{"a target outside", &actuatorv1.GetScaleRequest{Target: ref("team-b")}, "team-b"},
		{"a target without a namespace", &collectorv1.GetWindowRequest{Target: ref("")}, ""},
		{"no target: validation's to refuse", &actuatorv1.GetScaleRequest{}, "-"},
		{"a list of one namespace", &deciderv1.ListDecisionsRequest{Namespace: "team-a"}, "-"},
		{"a list of every namespace", &collectorv1.ListTargetsRequest{}, ""},
		{"a watch of another", &deciderv1.WatchDecisionsRequest{Namespace: "kube-system"}, "kube-system"},
		{"the last of many stats", &collectorv1.PushStatsRequest{Stats: []*collectorv1.Stat{{Target: ref("team-a")}, {Target: ref("team-a")}, {Target: ref("team-b")}}}, "team-b"},
		{"a removed target in an Ingest", &deciderv1.IngestRequest{Specs: []*deciderv1.TargetSpec{{Target: ref("team-a")}}, Removed: []*commonv1.TargetRef{ref("team-z")}}, "team-z"},
		{"a Function", &actuatorv1.UndeployRequest{Function: &actuatorv1.FunctionRef{Namespace: "kube-system", Name: "coredns"}}, "kube-system"},
		{"a ScaledObject", &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{Namespace: "team-b", ScalerMetadata: map[string]string{"namespace": "team-a"}}}, "team-b"},
		{"a KEDA target forwarded", &collectorv1.EnsureKEDATargetRequest{Namespace: "team-a"}, "-"},
		{"a health check", &healthpb.HealthCheckRequest{Service: "x"}, "-"},
	} {
		got, out := firstOutOfScope(tt.msg, team)
		switch {
		case tt.out == "-" && out:
			t.Errorf("%s: %q out of scope, want none", tt.name, got)
		case tt.out != "-" && (!out || got != tt.out):
			t.Errorf("%s: %q (%v), want %q out of scope", tt.name, got, out, tt.out)
		}
	}
	err := checkScope("/m", idTenant.String(), &collectorv1.ListTargetsRequest{}, team)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"team-a"`) || !strings.Contains(err.Error(), "every namespace") || !strings.Contains(err.Error(), idTenant.String()) {
		t.Errorf("checkScope: %v, want PERMISSION_DENIED naming the caller, its namespaces and what it asked", err)
	}
}
