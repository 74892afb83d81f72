package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// listNames pages through ListTargets and returns the names seen.
func listNames(t *testing.T, c collectorv1.CollectorServiceClient, req *collectorv1.ListTargetsRequest, between func()) []string {
	t.Helper()
	var names []string
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("paging does not end")
		}
		resp, err := c.ListTargets(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if max := commonv1.PageSize(req.GetPageSize()); len(resp.GetTargets()) > max {
			t.Fatalf("page of %d targets, want at most %d", len(resp.GetTargets()), max)
		}
		for _, s := range resp.GetTargets() {
			names = append(names, s.GetTarget().GetName())
		}
		if resp.GetNextPageToken() == "" {
			return names
		}
		if between != nil {
			between()
			between = nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func TestListTargetsPages(t *testing.T) {
	f := startHandler(t, false, nil)
	var want []string
	for i := range 25 {
		want = append(want, fmt.Sprintf("t%02d", i))
	}
	f.known(want...)
	f.hub.SetSpec(&deciderv1.TargetSpec{Target: &commonv1.TargetRef{Namespace: "other", Name: "x"}, Strategy: commonv1.Strategy_STRATEGY_KPA}, 0)

	for _, size := range []int32{0, 1, 7, 25, 5000} {
		if got := listNames(t, f.client, &collectorv1.ListTargetsRequest{Namespace: "ns", PageSize: size}, nil); !slices.Equal(got, want) {
			t.Errorf("pages of %d: %v, want %v", size, got, want)
		}
	}
	if got := listNames(t, f.client, &collectorv1.ListTargetsRequest{PageSize: 10}, nil); len(got) != 26 {
		t.Errorf("all namespaces: %d targets, want 26", len(got))
	}

	// Targets added and removed between pages change no other target's page.
	got := listNames(t, f.client, &collectorv1.ListTargetsRequest{Namespace: "ns", PageSize: 10}, func() {
		f.hub.Remove(ref("t00")) // on the first page
		f.hub.Remove(ref("t20")) // on the last
		f.known("t05a")          // on the first page's span: not seen
		f.known("t15a")          // on the second's
	})
	wantAfter := slices.Concat(want[:16], []string{"t15a"}, want[16:20], want[21:])
	if !slices.Equal(got, wantAfter) {
		t.Errorf("with changes between pages: %v, want %v", got, wantAfter)
	}

	for _, tt := range []struct {
		name string
		req  *collectorv1.ListTargetsRequest
	}{
		{"negative page size", &collectorv1.ListTargetsRequest{PageSize: -1}},
		{"not base64", &collectorv1.ListTargetsRequest{PageToken: "??"}},
		{"a decider's token", &collectorv1.ListTargetsRequest{PageToken: commonv1.PageToken("ns/t01")}},
		{"too long", &collectorv1.ListTargetsRequest{PageToken: strings.Repeat("A", 1<<20)}},
	} {
		_, err := f.client.ListTargets(context.Background(), tt.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "page_") || len(err.Error()) > 300 {
			t.Errorf("%s: %v, want a short InvalidArgument naming the field", tt.name, err)
		}
	}
}
