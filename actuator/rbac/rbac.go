// Package rbac states exactly which Kubernetes API verbs on which resources
// the actuator needs, as RBAC policy rules for one ClusterRole (it works
// across all namespaces), or for a Role in each namespace it watches
// (--namespaces). The chart turns Rules into its ClusterRole or Roles, and
// the actuator's integration test runs the binary with a ServiceAccount
// bound to nothing else, so a missing rule fails a test.
//
//	group                  resource                       verbs                         why
//	autoscaling.tidal.dev  podautoscalers                 get list watch create update delete   informer; record each decision; a lag PodAutoscaler per Function
//	autoscaling.tidal.dev  podautoscalers/status          update                        desiredScale, actualScale, conditions
//	autoscaling.tidal.dev  podautoscalers/finalizers      update                        Metric owner references with blockOwnerDeletion (*)
//	autoscaling.tidal.dev  metrics                        list watch create update delete   one Metric per PodAutoscaler (read from the informer)
//	functions.tidal.dev    functions                      list watch                    informer; owner of the Deployment (read from it)
//	functions.tidal.dev    functions/status               update                        deploymentName, replicas, Ready
//	functions.tidal.dev    functions/finalizers           update                        Deployment and PodAutoscaler owner references with blockOwnerDeletion (*)
//	functions.tidal.dev    topics                         list watch                    the partition cap (read from the informer)
//	apps                   deployments                    get list watch create patch delete   Deployer (server-side apply is patch)
//	apps                   deployments/scale              get update patch              scale targets (a cached Deployment is patched in one request)
//	apps                   statefulsets                   list watch                    GetScale's cache of their scales (trimmed to them)
//	apps                   statefulsets/scale             get update                    scale targets
//	apps                   replicasets/scale              get update                    scale targets
//	""                     pods                           list watch                    ready pods of each target
//	""                     events                         create patch                  scale changes and refusals (client-go's recorder patches repeats)
//
// (*) Needed only where the OwnerReferencesPermissionEnforcement admission
// plugin is on (OpenShift, some hardened clusters); harmless elsewhere.
//
// A custom resource used as a scale target needs "get" and "update" on its
// "<plural>/scale" too (Extra builds that rule). Discovery (/api, /apis) is
// open to every authenticated user through the default system:discovery role.
package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"
)

// Rules returns the actuator's policy rules.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"autoscaling.tidal.dev"}, Resources: []string{"podautoscalers"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"autoscaling.tidal.dev"}, Resources: []string{"podautoscalers/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{"autoscaling.tidal.dev"}, Resources: []string{"podautoscalers/finalizers"}, Verbs: []string{"update"}},
		{APIGroups: []string{"autoscaling.tidal.dev"}, Resources: []string{"metrics"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{"functions.tidal.dev"}, Resources: []string{"functions"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"functions.tidal.dev"}, Resources: []string{"functions/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{"functions.tidal.dev"}, Resources: []string{"functions/finalizers"}, Verbs: []string{"update"}},
		{APIGroups: []string{"functions.tidal.dev"}, Resources: []string{"topics"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments/scale"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets/scale", "replicasets/scale"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
}

// Extra returns the rule a custom scale target needs: get and update on
// its scale subresource.
func Extra(group, plural string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{plural + "/scale"}, Verbs: []string{"get", "update"}}
}
