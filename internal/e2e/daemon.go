package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// daemon is a long-running engine process started by the harness.
type daemon struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed
}

// startDaemon starts argv with env, stdout and stderr appended to logPath, in
// its own process group, killed if the test process dies.
func startDaemon(name, logPath string, env []string, argv ...string) (*daemon, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("e2e: %s log: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout = lf
	cmd.Stderr = lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("e2e: starting %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, logPath: logPath, logFile: lf, done: make(chan struct{})}
	go func() {
		d.waitErr = cmd.Wait()
		lf.Close()
		close(d.done)
	}()
	return d, nil
}

// exited reports whether the daemon has exited, and how.
func (d *daemon) exited() (bool, error) {
	select {
	case <-d.done:
		if d.waitErr == nil {
			return true, errors.New("exited with status 0")
		}
		return true, d.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs the process group.
// It returns an error only when the daemon could not be made to exit.
func (d *daemon) stop(grace time.Duration) error {
	if ok, _ := d.exited(); ok {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-d.done:
		return fmt.Errorf("e2e: %s did not exit within %v of SIGTERM; killed it", d.name, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("e2e: %s (pid %d) survived SIGKILL", d.name, d.cmd.Process.Pid)
	}
}

// waitReady polls ready every 50ms until it returns nil, the daemon exits,
// or timeout passes.
func (d *daemon) waitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if ok, err := d.exited(); ok {
			return fmt.Errorf("e2e: %s exited during startup: %v\n%s", d.name, err, tailFile(d.logPath, 40))
		}
		if last = ready(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("e2e: %s not ready after %v: %v\n%s", d.name, timeout, last, tailFile(d.logPath, 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shutdown is an engine's test cleanup: it reports a daemon that died during
// the test; otherwise it runs removeAll (which clears the engine's containers)
// and stops the daemon within grace. Then it kills leftover processes whose
// command line mentions dir, and logs the daemon's log tail if t failed.
func (d *daemon) shutdown(t testing.TB, dir string, grace time.Duration, removeAll func()) {
	if ok, err := d.exited(); ok {
		t.Errorf("e2e: %s died during the test: %v\n%s", d.name, err, tailFile(d.logPath, 40))
	} else {
		removeAll()
		if err := d.stop(grace); err != nil {
			t.Errorf("%v", err)
		}
	}
	if pids := killProcsMentioning(dir); len(pids) > 0 {
		t.Logf("e2e: %s cleanup: killed leftover processes %v", d.name, pids)
	}
	if t.Failed() {
		t.Logf("e2e: %s log tail (%s):\n%s", d.name, d.logPath, tailFile(d.logPath, 60))
	}
}
