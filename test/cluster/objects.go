package cluster

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Deployment returns a Deployment of fake pods (kwok runs no containers) with
// the given replicas, its pods labelled labels; nil labels mean app=<name>.
func Deployment(name string, labels map[string]string, replicas int32) *appsv1.Deployment {
	if labels == nil {
		labels = map[string]string{"app": name}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "tidal.test/fake:latest"}}},
			},
		},
	}
}
