package workload

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PodReady reports whether a pod counts as serving: Running, Ready, with an
// IP, and not terminating, as Knative's scraper qualifies pods.
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podEvents receive the pods of a watch: ready for every add or update of a
// pod that is PodReady, gone for one that stopped being ready or was deleted.
// Both may repeat for the same pod.
type podEvents struct {
	ready func(p *corev1.Pod)
	gone  func(name string)
}

// watchPods runs a pod informer over the pods of ns matching selector until
// ctx ends; the returned function waits for it to shut down.
func watchPods(ctx context.Context, client kubernetes.Interface, ns, selector string, ev podEvents) (synced cache.InformerSynced, wait func()) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	sync := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if PodReady(p) {
			ev.ready(p)
		} else {
			ev.gone(p.Name)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    sync,
		UpdateFunc: func(_, obj any) { sync(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				ev.gone(p.Name)
			}
		},
	})
	factory.Start(ctx.Done())
	return inf.HasSynced, func() {
		<-ctx.Done()
		factory.Shutdown()
	}
}
