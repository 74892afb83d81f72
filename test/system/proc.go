package system

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tidalscale/tidal/test/cluster"
	"github.com/tidalscale/tidal/test/testkit"
)

// Proc is one tidal service process. Its addresses stay the same across
// restarts, as a Kubernetes Service's would.
type Proc struct {
	Name     string
	GRPCAddr string
	HTTPAddr string
	bin      string
	args     []string
	logPath  string
	// Creds are what Start's health check and Conn dial with; nil means
	// plaintext. Set them before Start.
	Creds credentials.TransportCredentials
	// Env is added to the process's environment (KEY=VALUE each), over
	// this one's. Set it before Start.
	Env []string

	// mu guards cmd and exited.
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// NewProc prepares service svc from binDir with args added after its
// address flags; logs go to logDir/<name>.log. Nothing starts until Start.
func NewProc(name, binDir, svc, logDir string, args ...string) (*Proc, error) {
	ports, err := testkit.FreePorts(2)
	if err != nil {
		return nil, err
	}
	return newProc(fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1]), name, binDir, svc, logDir, args), nil
}

// NewProcOn is NewProc serving gRPC on grpcAddr, e.g. the address of a pod
// the test made, so that what finds the service through that pod finds the
// process.
func NewProcOn(grpcAddr, name, binDir, svc, logDir string, args ...string) (*Proc, error) {
	ports, err := testkit.FreePorts(1)
	if err != nil {
		return nil, err
	}
	return newProc(grpcAddr, fmt.Sprintf("127.0.0.1:%d", ports[0]), name, binDir, svc, logDir, args), nil
}

func newProc(g, h, name, binDir, svc, logDir string, args []string) *Proc {
	return &Proc{
		Name: name, GRPCAddr: g, HTTPAddr: h,
		bin:     filepath.Join(binDir, "tidal-"+svc),
		args:    append([]string{"--grpc-addr", g, "--http-addr", h}, args...),
		logPath: filepath.Join(logDir, name+".log"),
	}
}

// Start starts the process and waits until its gRPC health service says
// SERVING, or fails with the tail of its log.
func (p *Proc) Start(ctx context.Context, timeout time.Duration) error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	if len(p.Env) > 0 {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, and SIGKILL when the parent dies, so nothing
	// outlives the test or `make run` even if they are killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	if err := p.waitServing(ctx, timeout, exited); err != nil {
		p.Kill()
		return err
	}
	return nil
}

func (p *Proc) waitServing(ctx context.Context, timeout time.Duration, exited chan struct{}) error {
	conn, err := p.Conn()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last := "status " + resp.GetStatus().String()
		if err != nil {
			last = err.Error()
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited while starting:\n%s", p.Name, p.LogTail(40))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not SERVING after %v (last: %s):\n%s", p.Name, timeout, last, p.LogTail(40))
		}
	}
}

// Stop sends SIGTERM and waits up to grace, then dumps the goroutines
// (SIGQUIT) and kills. It reports an error when the process did not exit
// cleanly on SIGTERM.
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil // already ended, by Kill or on its own
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
		if st := cmd.ProcessState; st != nil && !st.Success() {
			return fmt.Errorf("%s exited with %v after SIGTERM:\n%s", p.Name, st, p.LogTail(20))
		}
		return nil
	case <-time.After(grace):
		// SIGQUIT makes the Go runtime write every goroutine's stack to
		// the log before it exits: what the process was waiting on.
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
		p.Kill()
		return fmt.Errorf("%s did not stop within %v of SIGTERM (its goroutines are in %s)", p.Name, grace, p.logPath)
	}
}

// Kill ends the process group at once, as a crash would.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Running reports whether the process is alive.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Conn dials the process's gRPC port with Creds.
func (p *Proc) Conn() (*grpc.ClientConn, error) {
	creds := p.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(creds))
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	tail, err := cluster.FileTail(p.logPath, n)
	if err != nil {
		return err.Error()
	}
	return tail
}
