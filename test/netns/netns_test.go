package netns

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// echo answers each line on ln's connections with the line and tag, until
// ln is closed.
func echo(ln net.Listener, tag string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil {
				_, _ = c.Write([]byte(strings.TrimSpace(line) + " " + tag + "\n"))
			}
		}()
	}
}

func ask(t *testing.T, addr, line string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return strings.TrimSpace(got)
}

// TestLinkAndRelay: a server inside the namespace is reached from the
// machine at the namespace's linked address, which is not loopback; a
// process inside reaches the machine's loopback server through the relay
// at the same address; the link is gone once the namespace is.
func TestLinkAndRelay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace and a veth pair")
	}
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hostLn.Close() }()
	go echo(hostLn, "from the machine")

	ns, err := New(hostLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			ns.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, inside, err := ns.Link(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inside.IsLoopback() || host.IsLoopback() || !netip.MustParsePrefix("198.19.0.0/16").Contains(inside) {
		t.Fatalf("link addresses %s and %s: want both in 198.19.0.0/16", host, inside)
	}
	if _, _, err := ns.Link(ctx); err == nil {
		t.Error("a second Link: want an error")
	}

	inLn, err := ns.Listen("tcp", netip.AddrPortFrom(inside, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = inLn.Close() }()
	go echo(inLn, "from the namespace")
	if got := ask(t, inLn.Addr().String(), "hello"); got != "hello from the namespace" {
		t.Errorf("the namespace's server at %s answered %q", inLn.Addr(), got)
	}
	// The namespace has its own loopback: the machine's loopback server is
	// not there but through the relay.
	if _, err := ns.Listen("tcp", hostLn.Addr().String()); err == nil {
		t.Errorf("listening inside at the relayed address %s: want it taken by the relay", hostLn.Addr())
	}
	cmd, err := ns.Command("ip", "-o", "-4", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr inside: %v: %s", err, out)
	}
	if !strings.Contains(string(out), inside.String()+"/30") || strings.Contains(string(out), host.String()+"/") {
		t.Errorf("addresses inside the namespace:\n%s\nwant %s and not %s", out, inside, host)
	}
	// A client inside the namespace (its socket made there) reaches the
	// machine's loopback server through the relay.
	var c net.Conn
	if err := ns.within(func() error {
		var err error
		c, err = net.DialTimeout("tcp", hostLn.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("dial %s inside the namespace: %v", hostLn.Addr(), err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte("hi\n"))
	line, err := bufio.NewReader(c).ReadString('\n')
	_ = c.Close()
	if got := strings.TrimSpace(line); err != nil || got != "hi from the machine" {
		t.Errorf("through the relay: %q, %v", got, err)
	}

	_ = inLn.Close()
	ns.Close()
	closed = true
	// The kernel destroys a namespace with nothing left in it, and its
	// links, in the background.
	link := "tidalns" + strings.Split(host.String(), ".")[2] + "h"
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return exec.CommandContext(ctx, "ip", "link", "show", link).Run() != nil, nil
	})
	if err != nil {
		t.Errorf("link %s still there 10 s after Close: %v", link, err)
	}
}
