package knative

import rbacv1 "k8s.io/api/rbac/v1"

// Rules returns the policy rules the Knative reconciler needs beyond the
// actuator's own (actuator/rbac): the chart adds them with
// knative.enabled, and the actuator's integration test binds exactly both.
//
//	group                             resource                    verbs                        why
//	autoscaling.internal.knative.dev  podautoscalers              get list watch               informer
//	autoscaling.internal.knative.dev  podautoscalers/status       update                       status
//	autoscaling.internal.knative.dev  podautoscalers/finalizers   update                       ServerlessService owner references with blockOwnerDeletion (*)
//	networking.internal.knative.dev   serverlessservices          get list watch create update one per PodAutoscaler, its mode
//
// (*) As in actuator/rbac: needed only where OwnerReferencesPermissionEnforcement is on.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"autoscaling.internal.knative.dev"}, Resources: []string{"podautoscalers"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"autoscaling.internal.knative.dev"}, Resources: []string{"podautoscalers/status", "podautoscalers/finalizers"}, Verbs: []string{"update"}},
		{APIGroups: []string{"networking.internal.knative.dev"}, Resources: []string{"serverlessservices"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
	}
}
