// Package deciders finds the decider replicas' endpoints: from a headless
// Service's pods through the Pods API (an informer, so changes arrive as
// they happen), or from the Service's DNS name, looked up periodically.
package deciders

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Update receives the full, sorted endpoint list whenever it changes.
type Update func(addrs []string)

// WatchService follows the ready pods behind a Service (its selector) in
// namespace ns and reports podIP:port for each until ctx ends: the first
// list once the pod cache has synced, even when it is empty, then every
// change. It returns an error if the Service cannot be used, and otherwise
// nil once ctx ends and its informer has stopped; no update comes after it
// returns.
func WatchService(ctx context.Context, kube kubernetes.Interface, ns, name string, port int, update Update, log *zap.Logger) error {
	svc, err := kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("decider service %s/%s: %w", ns, name, err)
	}
	if len(svc.Spec.Selector) == 0 {
		return fmt.Errorf("decider service %s/%s: has no selector", ns, name)
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	inf := factory.Core().V1().Pods()
	lister := inf.Lister().Pods(ns)
	var last []string
	first := true
	report := func() {
		pods, _ := lister.List(sel)
		var addrs []string
		for _, p := range pods {
			if ready(p) {
				addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
			}
		}
		slices.Sort(addrs)
		if first || !slices.Equal(addrs, last) {
			first, last = false, addrs
			log.Info("decider endpoints", zap.Strings("deciders", addrs))
			update(addrs)
		}
	}
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke})
	// The factory's informers run until ctx ends; Shutdown waits for them.
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil // ctx ended first
	}
	report()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			report()
		}
	}
}

func ready(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WatchDNS resolves host (a headless Service's name) every interval and
// reports addr:port for each address until ctx ends. A failed lookup keeps
// the last list.
func WatchDNS(ctx context.Context, host string, port int, interval time.Duration, update Update, log *zap.Logger) {
	var last []string
	var r net.Resolver
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		ips, err := r.LookupHost(ctx, host)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("decider DNS lookup failed; keeping the last endpoints", zap.String("host", host), zap.Error(err))
			}
			return
		}
		addrs := make([]string, len(ips))
		for i, ip := range ips {
			addrs[i] = net.JoinHostPort(ip, strconv.Itoa(port))
		}
		slices.Sort(addrs)
		if !slices.Equal(addrs, last) {
			last = addrs
			log.Info("decider endpoints", zap.Strings("deciders", addrs))
			update(addrs)
		}
	}, interval)
}
