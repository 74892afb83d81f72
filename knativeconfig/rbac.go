package knativeconfig

import rbacv1 "k8s.io/api/rbac/v1"

// Rules returns what a Watcher needs, in a Role in Knative's namespace: the
// three ConfigMaps by name (each informer lists and watches one with a
// field selector on metadata.name, which the API server authorizes against
// resourceNames). Events on a refused ConfigMap need the recorder's own
// events rule.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: Names, Verbs: []string{"get", "list", "watch"}},
	}
}
