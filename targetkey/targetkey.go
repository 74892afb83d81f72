// Package targetkey is a scale target's identity, spelled the same way in
// the collector, the decider and the actuator: a Deployment and a
// StatefulSet of one name in one namespace are two targets everywhere.
package targetkey

import "strings"

// GroupKind returns the API group and kind of a target named by apiVersion
// and kind, reading the empty parts as apps/v1 Deployment. The version is
// not part of a target's identity. It does not allocate.
func GroupKind(apiVersion, kind string) (group, k string) {
	if apiVersion == "" {
		apiVersion = "apps/v1"
	}
	if kind == "" {
		kind = "Deployment"
	}
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g, kind
	}
	return "", kind // the core group: "v1"
}

// Qualifier is what a target's key adds to namespace/name: "" for an apps
// Deployment, the most common target, else "Kind.group" ("Kind" for the
// core group).
func Qualifier(apiVersion, kind string) string {
	return qualifier(GroupKind(apiVersion, kind))
}

func qualifier(group, k string) string {
	switch {
	case group == "apps" && k == "Deployment":
		return ""
	case group == "":
		return k
	}
	return k + "." + group
}

// Of is a target's key: namespace/name for an apps Deployment, and
// namespace/Kind.group/name for any other kind.
func Of(namespace, name, apiVersion, kind string) string {
	group, k := GroupKind(apiVersion, kind)
	return OfGroupKind(namespace, name, group, k)
}

// OfGroupKind is Of for a target whose group and kind GroupKind returned.
func OfGroupKind(namespace, name, group, kind string) string {
	if q := qualifier(group, kind); q != "" {
		return namespace + "/" + q + "/" + name
	}
	return namespace + "/" + name
}
