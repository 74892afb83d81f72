package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane component running in its own process group,
// logging to a file in the cluster directory.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// exited is closed when the process has been waited for; err is its exit
	// status, valid after that.
	exited chan struct{}
	err    error
}

// startProcess starts bin with args. The child gets its own process group, so
// Stop can signal it and anything it forks, and SIGKILL as its parent-death
// signal, so it dies with the test binary even if that is killed without a
// chance to clean up.
func startProcess(dir, name, bin string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	return startCmd(dir, name, cmd)
}

// startCmd starts cmd as startProcess does, its output in dir/name.log.
func startCmd(dir, name string, cmd *exec.Cmd) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	// The pid file lets a later run find and kill this process if the test
	// binary died in a way even Pdeathsig could not cover.
	_ = os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// running reports an error if the process has already exited.
func (p *process) running() error {
	select {
	case <-p.exited:
		err := p.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("%s exited: %w\n%s", p.name, err, p.logTail(30))
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
	}
	// Reap anything the component forked that outlived it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	tail, err := FileTail(p.logPath, n)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s", strings.Count(tail, "\n")+1, p.logPath, tail)
}

// FileTail returns the last n lines of the file at path, as the processes'
// logs are shown when a test fails.
func FileTail(path string, n int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}

// reapStale removes cluster directories under root left by test processes
// that died without cleaning up, first killing any component still running
// from them.
func reapStale(root string) {
	dirs, _ := filepath.Glob(filepath.Join(root, dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || processAlive(owner) {
			continue
		}
		pids, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range pids {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			// Kill only a process that still refers to this directory, never
			// an unrelated one that reused the pid.
			if err == nil && pid != owner && cmdlineMentions(pid, dir) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(dir)
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func cmdlineMentions(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(b, []byte(s))
}

// Process is a component a test runs as part of the cluster (Cluster.Run):
// a peer's controller or extension API server.
type Process struct{ p *process }

// Stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) { p.p.stop(grace) }

// Err is nil while the process runs, and once it has exited says how, with
// the end of its log.
func (p *Process) Err() error { return p.p.running() }

// LogTail returns the last n lines of the process's log, headed by its path.
func (p *Process) LogTail(n int) string { return p.p.logTail(n) }
