package deciders

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

func TestMain(m *testing.M) { cluster.Main(m) }

type updates struct {
	mu   sync.Mutex
	last []string
	n    int
}

func (u *updates) set(a []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.last, u.n = slices.Clone(a), u.n+1
}

func (u *updates) get() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.last)
}

func TestWatchServiceFollowsReadyPods(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decider"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "decider"},
			Ports: []corev1.ServicePort{{Name: "grpc", Port: 9002}}},
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mkPod := func(name string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "decider"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "d", Image: "example.com/decider"}}}}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkPod("decider-0")
	u := &updates{}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- WatchService(wctx, c.Client, ns, "decider", 9002, u.set, zap.NewNop()) }()
	testkit.Eventually(t, time.Minute, "one endpoint", func() bool { return len(u.get()) == 1 })
	mkPod("decider-1")
	testkit.Eventually(t, time.Minute, "two endpoints", func() bool { return len(u.get()) == 2 })
	for _, a := range u.get() {
		if a[len(a)-5:] != ":9002" {
			t.Errorf("endpoint %s lacks the port", a)
		}
	}
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "decider-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "one endpoint after a delete", func() bool { return len(u.get()) == 1 })

	// WatchService watches until its context ends, and only then returns:
	// nothing it started outlives it, and no update comes after.
	select {
	case err := <-done:
		t.Fatalf("WatchService returned (%v) before its context ended, leaving its watch to no one", err)
	default:
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchService = %v after its context ended, want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("WatchService still running a minute after its context ended")
	}
	u.mu.Lock()
	n := u.n
	u.mu.Unlock()
	mkPod("decider-2")
	time.Sleep(500 * time.Millisecond)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n != n {
		t.Errorf("%d updates after WatchService returned, want none", u.n-n)
	}
}

// TestWatchServiceReportsAnEmptyFirstList: with no decider ready yet, the
// first list is still reported (empty), so a caller waiting for it is not
// held up until a decider starts.
func TestWatchServiceReportsAnEmptyFirstList(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decider"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "decider"}},
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := &updates{}
	done := make(chan error, 1)
	go func() { done <- WatchService(ctx, c.Client, ns, "decider", 9002, u.set, zap.NewNop()) }()
	testkit.Eventually(t, time.Minute, "the first, empty list", func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.n == 1 && len(u.last) == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchService = %v, want nil", err)
	}
}

func TestWatchServiceOfAMissingService(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	if err := WatchService(context.Background(), c.Client, ns, "missing", 9002, func([]string) {}, zap.NewNop()); err == nil {
		t.Error("WatchService of a missing Service succeeded")
	}
}

func TestWatchDNS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := &updates{}
	done := make(chan struct{})
	go func() { WatchDNS(ctx, "localhost", 9002, 10*time.Millisecond, u.set, zap.NewNop()); close(done) }()
	testkit.Eventually(t, time.Minute, "localhost resolved", func() bool { return len(u.get()) > 0 })
	if got := u.get(); !slices.Contains(got, "127.0.0.1:9002") {
		t.Errorf("endpoints %v, want 127.0.0.1:9002 among them", got)
	}
	time.Sleep(50 * time.Millisecond)
	u.mu.Lock()
	n := u.n
	u.mu.Unlock()
	if n != 1 {
		t.Errorf("%d updates for an unchanged answer, want 1", n)
	}
	cancel()
	<-done
}
