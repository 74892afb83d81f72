package targetkey

import "testing"

func TestOf(t *testing.T) {
	tests := []struct {
		apiVersion, kind string
		want             string
	}{
		{"", "", "ns/web"},
		{"apps/v1", "Deployment", "ns/web"},
		{"apps/v1beta2", "Deployment", "ns/web"},
		{"apps/v1", "StatefulSet", "ns/StatefulSet.apps/web"},
		{"", "StatefulSet", "ns/StatefulSet.apps/web"},
		{"v1", "ReplicationController", "ns/ReplicationController/web"},
		{"example.com/v1", "Widget", "ns/Widget.example.com/web"},
	}
	for _, tt := range tests {
		if got := Of("ns", "web", tt.apiVersion, tt.kind); got != tt.want {
			t.Errorf("Of(ns, web, %q, %q) = %q, want %q", tt.apiVersion, tt.kind, got, tt.want)
		}
	}
}

func TestGroupKindDoesNotAllocate(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = GroupKind("apps/v1", "StatefulSet") }); n != 0 {
		t.Errorf("GroupKind allocates %v times", n)
	}
}
