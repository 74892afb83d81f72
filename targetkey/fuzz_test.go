package targetkey

import (
	"strings"
	"testing"
)

// FuzzOf checks that a key names its target exactly: for names as
// Kubernetes allows them (no '/' in a namespace, name or group, no '.' in
// a kind), the key parses back to the namespace, the name and the
// (group, kind) GroupKind reads, whatever the version; and Of agrees with
// OfGroupKind and Qualifier.
func FuzzOf(f *testing.F) {
	for _, s := range [][4]string{
		{"ns", "web", "", ""},
		{"ns", "web", "apps/v1", "Deployment"},
		{"ns", "web", "apps/v1beta2", "StatefulSet"},
		{"ns", "web", "v1", "ReplicationController"},
		{"ns", "web", "v1", "Deployment"},
		{"ns", "web", "serving.knative.dev/v1", "Revision"},
		{"ns", "a.b.c", "example.com/v1/extra", "Widget"},
		{"ns", "web", "/v1", "Deployment"},
		{"n\x00s", "w\neb", "apps/", "Deploy\x1bment"},
		{strings.Repeat("n", 300), strings.Repeat("w", 300), strings.Repeat("g", 300) + "/v1", strings.Repeat("K", 300)},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, ns, name, apiVersion, kind string) {
		group, k := GroupKind(apiVersion, kind)
		key := Of(ns, name, apiVersion, kind)
		if key != OfGroupKind(ns, name, group, k) {
			t.Fatalf("Of = %q, OfGroupKind = %q", key, OfGroupKind(ns, name, group, k))
		}
		if q := Qualifier(apiVersion, kind); (q == "") != (group == "apps" && k == "Deployment") {
			t.Fatalf("Qualifier(%q, %q) = %q for group %q kind %q", apiVersion, kind, q, group, k)
		}
		if strings.Contains(ns, "/") || strings.Contains(name, "/") || ns == "" || name == "" ||
			strings.Contains(group, "/") || strings.ContainsAny(k, "./") {
			return // not a Kubernetes object: no key need tell it apart
		}
		if _, version, ok := strings.Cut(apiVersion, "/"); ok && group != "" {
			if other := Of(ns, name, group+"/"+version+"x", kind); other != key {
				t.Fatalf("key depends on the version: %q and %q", key, other)
			}
		}
		parts := strings.Split(key, "/")
		gotNS, gotName, gotGroup, gotKind := parts[0], parts[len(parts)-1], "apps", "Deployment"
		switch len(parts) {
		case 2:
		case 3:
			gotKind, gotGroup, _ = strings.Cut(parts[1], ".")
		default:
			t.Fatalf("key %q has %d parts", key, len(parts))
		}
		if gotNS != ns || gotName != name || gotGroup != group || gotKind != k {
			t.Fatalf("key %q reads as %s/%s %s.%s, want %s/%s %s.%s", key, gotNS, gotName, gotKind, gotGroup, ns, name, k, group)
		}
	})
}
