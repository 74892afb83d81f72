// Package netns gives a test process of its own a network namespace: a
// peer's process that binds fixed ports on every address runs in one
// (Knative's controller), and so does a server the API server must reach at
// an address that is not loopback (KEDA's metrics server behind an
// APIService: the API refuses loopback endpoints), which Link gives it on a
// veth pair, from 198.19.0.0/16 (in 198.18.0.0/15, reserved for
// benchmarking): addresses of the test's own, and no traffic leaves the
// machine. Needs root
// (unshare(2) with CLONE_NEWNET), util-linux's nsenter and, for Link,
// iproute2's ip.
package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tidalscale/tidal/test/cluster"
)

// Namespace is a network namespace with its loopback up, held open by this
// process: it ends, with any veth pair in it, when Close has run and the
// last process started in it has exited.
type Namespace struct {
	file   *os.File
	slot   func() // releases Link's slot
	lns    []net.Listener
	relays relaySet
	wg     sync.WaitGroup
}

// New makes a network namespace. Each of forward (host:port on the
// machine's loopback: the API server) is listened on at the same address
// inside the namespace and relayed to the machine's, so a kubeconfig works
// unchanged in there.
func New(forward ...string) (*Namespace, error) {
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
	n := &Namespace{file: m.ns, lns: m.lns, relays: relaySet{conns: map[net.Conn]bool{}}}
	if m.err != nil {
		n.Close()
		return nil, m.err
	}
	for i, ln := range n.lns {
		to := forward[i]
		n.wg.Go(func() { n.relays.serve(ln, func(net.Addr) string { return to }, &n.wg) })
	}
	return n, nil
}

// Close stops the relays and lets the namespace go once no process runs
// in it.
func (n *Namespace) Close() {
	for _, ln := range n.lns {
		_ = ln.Close()
	}
	n.relays.closeAll()
	n.wg.Wait()
	if n.file != nil {
		_ = n.file.Close()
	}
	if n.slot != nil {
		n.slot()
	}
}

// File is the namespace as an open file, for nsenter (--net=/proc/self/fd/3
// with the file as the child's ExtraFiles[0]).
func (n *Namespace) File() *os.File { return n.file }

// Command is name with args run inside the namespace through nsenter. The
// caller must leave its ExtraFiles as they are.
func (n *Namespace) Command(name string, args ...string) (*exec.Cmd, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("a process enters its network namespace with util-linux's nsenter: %w", err)
	}
	cmd := exec.Command(nsenter, append([]string{"--net=/proc/self/fd/3", "--", name}, args...)...)
	cmd.ExtraFiles = []*os.File{n.file}
	return cmd, nil
}

// Link joins the namespace to the machine's with a veth pair and returns
// its two addresses: host, on the machine's side, and inside, in the
// namespace. A server in the namespace listening at inside is reached from
// the machine at that address, which is not loopback. The pair takes a slot
// of its own (one of 64, locked until Close, so namespaces of processes
// side by side never share an address): addresses 198.19.S.1 and
// 198.19.S.2 in 198.19.S.0/30, links tidalnsSh and tidalnsSn. It goes with
// the namespace.
func (n *Namespace) Link(ctx context.Context) (host, inside netip.Addr, err error) {
	if n.slot != nil {
		return netip.Addr{}, netip.Addr{}, errors.New("the namespace is linked already")
	}
	slot, release, err := cluster.TakeSlot(ctx, "tidal-netns-slots", slots)
	if err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("link slot: %w", err)
	}
	n.slot = release
	host, inside = netip.AddrFrom4([4]byte{198, 19, byte(slot), 1}), netip.AddrFrom4([4]byte{198, 19, byte(slot), 2})
	hostLink, nsLink := fmt.Sprintf("tidalns%dh", slot), fmt.Sprintf("tidalns%dn", slot)
	// A pair of this slot left by an earlier run is gone with its
	// namespace unless a process of that run still lives in it.
	_ = run(exec.CommandContext(ctx, "ip", "link", "del", hostLink))
	steps := []struct {
		inNS bool
		args []string
	}{
		{false, []string{"link", "add", hostLink, "type", "veth", "peer", "name", nsLink, "netns", "/proc/self/fd/3"}},
		{false, []string{"addr", "add", netip.PrefixFrom(host, 30).String(), "dev", hostLink}},
		{false, []string{"link", "set", hostLink, "up"}},
		{true, []string{"addr", "add", netip.PrefixFrom(inside, 30).String(), "dev", nsLink}},
		{true, []string{"link", "set", nsLink, "up"}},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, "ip", s.args...)
		cmd.ExtraFiles = []*os.File{n.file} // /proc/self/fd/3 of "link add"
		if s.inNS {
			if cmd, err = n.Command("ip", s.args...); err != nil {
				return netip.Addr{}, netip.Addr{}, err
			}
		}
		if err := run(cmd); err != nil {
			return netip.Addr{}, netip.Addr{}, fmt.Errorf("veth pair %s/%s (needs iproute2's ip): %w", hostLink, nsLink, err)
		}
	}
	return host, inside, nil
}

// Listen listens on addr inside the namespace.
func (n *Namespace) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.within(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// Forward listens on inside, within the namespace, and relays each
// connection to the address to returns for the connection's local address
// (the one the client dialled, which may be any of the namespace's
// addresses when inside is a wildcard), dialled from the machine's
// namespace, until Close; "" refuses the connection. It maps a fixed
// address a process in the namespace dials (Knative's activator's
// autoscaler, its pods) to where the test serves it.
func (n *Namespace) Forward(inside string, to func(local net.Addr) string) error {
	ln, err := n.Listen("tcp", inside)
	if err != nil {
		return fmt.Errorf("listen on %s in the private network namespace: %w", inside, err)
	}
	n.lns = append(n.lns, ln)
	n.wg.Go(func() { n.relays.serve(ln, to, &n.wg) })
	return nil
}

// DialContext dials addr from inside the namespace: a test's client of a
// server that listens there on every address of its own.
func (n *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.within(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// within runs f on a thread inside the namespace.
func (n *Namespace) within(f func() error) error {
	ch := make(chan error, 1)
	go func() {
		// As in New: back to the machine's namespace before the thread is
		// unlocked, or locked for good.
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer func() { _ = host.Close() }()
		if err := unix.Setns(int(n.file.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("enter the network namespace: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- errors.Join(ferr, fmt.Errorf("back to the machine's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		ch <- ferr
	}()
	return <-ch
}

// slots is how many linked namespaces can live side by side: one
// 198.19.S.0/30 each.
const slots = 64

// run runs cmd and returns its output in the error when it fails.
func run(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
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

// relaySet is the live relayed connections, closed with the namespace.
type relaySet struct {
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]bool
}

// serve accepts on ln (inside the namespace) and relays each connection to
// to(its local address) (dialled from the machine's namespace, where every
// other thread of this process is), until ln is closed.
func (s *relaySet) serve(ln net.Listener, to func(net.Addr) string, wg *sync.WaitGroup) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		addr := to(in.LocalAddr())
		if addr == "" {
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", addr)
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
