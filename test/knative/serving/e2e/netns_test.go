package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// privateNet makes a network namespace of its own, with its loopback up,
// for a process that binds fixed ports on every address: Knative's
// controller serves its health probes on :8080 (knative.dev/pkg
// injection.HealthCheckDefaultPort), the port Knative's autoscaler's stats
// server takes (cmd/autoscaler/main.go, statsServerAddr), and neither can be
// moved. Each of forward (host:port on the machine's loopback, the API
// server) is listened on at the same address inside the namespace and
// relayed to the machine's, so a kubeconfig works unchanged in there. It
// returns the namespace as an open file, for nsenter (--net=/proc/self/fd/3
// with the file as the child's ExtraFiles[0]); the relays and the file end
// with t. Needs root (unshare(2) with CLONE_NEWNET).
func privateNet(t *testing.T, forward ...string) *os.File {
	t.Helper()
	type made struct {
		ns  *os.File
		lns []net.Listener
		err error
	}
	ch := make(chan made, 1)
	go func() {
		// The thread enters the new namespace, makes the sockets there
		// (they stay in it wherever they are used from) and goes back
		// before it is unlocked, so no other goroutine ever runs in the
		// namespace. It must not end instead: a child's parent-death
		// signal fires when the thread that forked it ends, and Go threads
		// fork children (the control plane's, with Pdeathsig) at random.
		runtime.LockOSThread()
		var m made
		defer func() { ch <- m }()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			m.err = err
			runtime.UnlockOSThread()
			return
		}
		defer func() { _ = host.Close() }()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			m.err = fmt.Errorf("unshare a network namespace (needs root): %w", err)
			runtime.UnlockOSThread()
			return
		}
		m.ns, m.lns, m.err = inNewNamespace(forward)
		if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stuck in the new namespace: leave the thread locked, so it
			// ends with this goroutine rather than serve others from in
			// there.
			m.err = errors.Join(m.err, fmt.Errorf("back to the machine's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
	}()
	m := <-ch
	var wg sync.WaitGroup
	relays := &relaySet{conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		for _, ln := range m.lns {
			_ = ln.Close()
		}
		relays.closeAll()
		wg.Wait()
		if m.ns != nil {
			_ = m.ns.Close()
		}
	})
	if m.err != nil {
		t.Fatal(m.err)
	}
	for i, ln := range m.lns {
		wg.Go(func() { relays.serve(ln, forward[i], &wg) })
	}
	return m.ns
}

// inNewNamespace runs on the thread in the new namespace: lo up, the
// namespace held open, a listener at each of forward.
func inNewNamespace(forward []string) (*os.File, []net.Listener, error) {
	if err := loopbackUp(); err != nil {
		return nil, nil, err
	}
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, nil, err
	}
	var lns []net.Listener
	for _, addr := range forward {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			_ = ns.Close()
			return nil, nil, fmt.Errorf("listen on %s in the private network namespace: %w", addr, err)
		}
		lns = append(lns, ln)
	}
	return ns, lns, nil
}

// loopbackUp sets lo up in the calling thread's network namespace
// (SIOCSIFFLAGS, as `ip link set lo up`): a new namespace starts with it
// down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// relaySet is the live relayed connections, closed when the test ends.
type relaySet struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]bool
}

// serve accepts on ln (inside the namespace) and relays each connection to
// to (dialled from the machine's namespace, where every other thread of
// this process is), until ln is closed.
func (s *relaySet) serve(ln net.Listener, to string, wg *sync.WaitGroup) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", to)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !s.add(in, out) {
			return
		}
		wg.Go(func() {
			var pipes sync.WaitGroup
			pipes.Go(func() { pipe(out, in) })
			pipe(in, out)
			pipes.Wait()
			s.remove(in, out)
		})
	}
}

// pipe copies src to dst, then half-closes dst so the peer sees the end.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if tc, ok := dst.(*net.TCPConn); ok && (err == nil || errors.Is(err, net.ErrClosed)) {
		_ = tc.CloseWrite()
		return
	}
	_ = dst.Close()
}

func (s *relaySet) add(conns ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		s.conns[c] = true
	}
	return true
}

func (s *relaySet) remove(conns ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(s.conns, c)
	}
}

func (s *relaySet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
}
