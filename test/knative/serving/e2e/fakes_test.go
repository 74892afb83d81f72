package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	netapis "knative.dev/networking/pkg/apis/networking"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclient "knative.dev/networking/pkg/client/clientset/versioned"
	netheader "knative.dev/networking/pkg/http/header"
	"knative.dev/serving/pkg/networking"

	"github.com/tidalscale/tidal/test/workload"
)

// fakeEvery is how often the stand-ins below look again.
const fakeEvery = 200 * time.Millisecond

// runEvery calls f every fakeEvery until t ends, from a goroutine the
// cleanup waits for; f's errors are logged (the API may refuse a write the
// next round retries).
func runEvery(t *testing.T, what string, f func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var last atomic.Value
	wg.Go(func() {
		tk := time.NewTicker(fakeEvery)
		defer tk.Stop()
		for {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				if msg := err.Error(); last.Swap(msg) != msg {
					t.Logf("%s: %v", what, err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// mirrorIP moves a loopback pod IP (127.A.B.C, the test cluster's pod
// range) to 198.18.B.C, which the API accepts in Endpoints: the last two
// octets are unique within one cluster's /16.
func mirrorIP(podIP string) (string, error) {
	ip := net.ParseIP(podIP).To4()
	if ip == nil || ip[0] != 127 {
		return "", fmt.Errorf("pod IP %q is not a loopback IPv4 address", podIP)
	}
	return fmt.Sprintf("198.18.%d.%d", ip[2], ip[3]), nil
}

// mirrorPrivateEndpoints plays kube-controller-manager's endpoints
// controller for the private Services Knative's SKS reconciler creates in
// ns (label networking.internal.knative.dev/serviceType=Private): their
// Endpoints list the Ready pods their selector picks, at mirrorIP addresses.
// The endpoints controller tries too and is refused while a pod has a
// loopback IP; with no pods it writes the same empty Endpoints. httpPort,
// when not 0, is the port given for the pods' http port (Knative's queue
// port, 8012) instead: where the simulated pods serve requests, because
// Knative's activator binary holds 8012 on every address of its network
// namespace, where its requests to the pods are relayed (activator_test.go).
func mirrorPrivateEndpoints(t *testing.T, kube kubernetes.Interface, ns string, httpPort int32) {
	sel := labels.SelectorFromSet(labels.Set{networking.ServiceTypeKey: string(networking.ServiceTypePrivate)}).String()
	runEvery(t, "private endpoints", func(ctx context.Context) error {
		svcs, err := kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		for _, svc := range svcs.Items {
			if err := mirrorService(ctx, kube, &svc, httpPort); err != nil {
				return err
			}
		}
		return nil
	})
}

func mirrorService(ctx context.Context, kube kubernetes.Interface, svc *corev1.Service, httpPort int32) error {
	pods, err := kube.CoreV1().Pods(svc.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return err
	}
	var subsets []corev1.EndpointSubset //nolint:staticcheck // Knative v0.50.0's SKS reconciler reads v1 Endpoints
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range pods.Items {
		if !workload.PodReady(&p) || (httpPort != 0 && !accepts(p.Status.PodIP, httpPort)) {
			continue
		}
		ip, err := mirrorIP(p.Status.PodIP)
		if err != nil {
			return err
		}
		addr := corev1.EndpointAddress{IP: ip,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}}
		if p.Spec.NodeName != "" {
			addr.NodeName = &p.Spec.NodeName
		}
		ss := corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{addr}} //nolint:staticcheck // Knative v0.50.0's SKS reconciler reads v1 Endpoints
		for _, sp := range svc.Spec.Ports {
			port := targetPort(&p, sp)
			if httpPort != 0 && sp.Name == netapis.ServicePortNameHTTP1 {
				port = httpPort
			}
			ss.Ports = append(ss.Ports, corev1.EndpointPort{Name: sp.Name, Port: port, Protocol: sp.Protocol})
		}
		subsets = append(subsets, ss)
	}
	if len(subsets) > 1 {
		// One subset, as the endpoints controller repacks them.
		merged := subsets[0]
		for _, ss := range subsets[1:] {
			merged.Addresses = append(merged.Addresses, ss.Addresses...)
		}
		subsets = []corev1.EndpointSubset{merged} //nolint:staticcheck // Knative v0.50.0's SKS reconciler reads v1 Endpoints
	}
	eps, err := kube.CoreV1().Endpoints(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = kube.CoreV1().Endpoints(svc.Namespace).Create(ctx, &corev1.Endpoints{ //nolint:staticcheck // Knative v0.50.0's SKS reconciler reads v1 Endpoints
			ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: svc.Labels},
			Subsets:    subsets,
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil || equality.Semantic.DeepEqual(eps.Subsets, subsets) {
		return err
	}
	eps.Subsets = subsets
	_, err = kube.CoreV1().Endpoints(svc.Namespace).Update(ctx, eps, metav1.UpdateOptions{})
	return err
}

// accepts reports whether something listens at ip:port: with httpPort set,
// the simulated pods' serving port, as the kubelet's readiness probe of the
// queue-proxy would find it. kwok marks a pod Ready before the test's
// server for it listens, and Knative's activator sends a request to a pod
// its Endpoints list Ready without probing it first.
func accepts(ip string, port int32) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, fmt.Sprint(port)), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// targetPort resolves a Service port's target on pod p: a number, or the
// container port of that name.
func targetPort(p *corev1.Pod, sp corev1.ServicePort) int32 {
	if sp.TargetPort.IntVal != 0 {
		return sp.TargetPort.IntVal
	}
	if name := sp.TargetPort.StrVal; name != "" {
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == name {
					return cp.ContainerPort
				}
			}
		}
	}
	return sp.Port
}

// markIngressesReady plays an ingress implementation for the KIngresses
// Knative's route reconciler creates in ns: once programmed (at once here,
// nothing is), it marks them NetworkConfigured and LoadBalancerReady with an
// internal domain, with Knative's own status helpers.
func markIngressesReady(t *testing.T, nc netclient.Interface, ns string) {
	runEvery(t, "kingress status", func(ctx context.Context) error {
		ings, err := nc.NetworkingV1alpha1().Ingresses(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ing := range ings.Items {
			if ing.Status.ObservedGeneration == ing.Generation && ing.IsReady() {
				continue
			}
			upd := ing.DeepCopy()
			upd.Status.InitializeConditions()
			upd.Status.MarkNetworkConfigured()
			lb := []netv1alpha1.LoadBalancerIngressStatus{{DomainInternal: "ingress.e2e-ingress.svc.cluster.local"}}
			upd.Status.MarkLoadBalancerReady(lb, lb)
			upd.Status.ObservedGeneration = ing.Generation
			if _, err := nc.NetworkingV1alpha1().Ingresses(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// serviceFront plays cluster DNS and kube-proxy for one address: tidal's
// actuator resolves the revisions' public Service names to it (its
// /etc/hosts), and each request goes where the Service's Endpoints, as
// Knative's SKS reconciler wrote them, point: to the activator when they
// hold its addresses, else to the revision's pods, which no one simulates
// for traffic: a pod's queue-proxy answers an activator probe with 400
// (it accepts only its own probe value).
type serviceFront struct {
	kube      kubernetes.Interface
	activator atomic.Pointer[http.Handler]
	// Activator and Pods count the probes each answered.
	Activator, Pods atomic.Int32
}

// useActivator sends the activator's share of the traffic to h from now on:
// the activator reporting to tidal's collector, or later one reporting to
// Knative's autoscaler.
func (f *serviceFront) useActivator(h http.Handler) { f.activator.Store(&h) }

func (f *serviceFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	// SERVICE.NAMESPACE.svc.DOMAIN
	parts := strings.SplitN(host, ".", 3)
	if len(parts) < 3 || !strings.HasPrefix(parts[2], "svc.") {
		http.Error(w, "not a Service host name: "+host, http.StatusBadGateway)
		return
	}
	eps, err := f.kube.CoreV1().Endpoints(parts[1]).Get(r.Context(), parts[0], metav1.GetOptions{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	probe := r.Header.Get(netheader.ProbeKey) != ""
	if toActivator(eps) {
		if probe {
			f.Activator.Add(1)
		}
		(*f.activator.Load()).ServeHTTP(w, r)
		return
	}
	if probe {
		f.Pods.Add(1)
		http.Error(w, "unexpected probe header value", http.StatusBadRequest)
		return
	}
	http.Error(w, "the revision's pods serve no traffic in this test", http.StatusBadGateway)
}

// toActivator reports whether every ready address of eps is an activator's.
func toActivator(eps *corev1.Endpoints) bool { //nolint:staticcheck // Knative v0.50.0's SKS reconciler reads v1 Endpoints
	n := 0
	for _, ss := range eps.Subsets {
		for _, a := range ss.Addresses {
			if !slices.Contains(activatorIPs, a.IP) {
				return false
			}
			n++
		}
	}
	return n > 0
}
