package runtime

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// rtChild is a low-level runtime running as this process's child.
type rtChild interface {
	// Wait waits for it to end and returns its exit status (128+n when
	// signal n ended it).
	Wait() (int, error)
	// Kill ends it at once (SIGKILL); Wait still reaps it.
	Kill()
}

// relayed returns the signals an engine sends a runtime it waits for (a
// timeout's SIGTERM, a user's ^C): while the low-level runtime runs as
// this process's child they are passed on to it, as they would reach it
// had this process exec'ed it.
func relayed() []os.Signal {
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
}

// relay starts the low-level runtime as a child and passes the relayed
// signals on to it. Catching them (signal.Notify) costs a round trip to
// the Go runtime's signal thread per signal, 0.3-0.8 ms on a 2-vCPU VM,
// as does giving them back (signal.Stop). So arm does the first in the
// background as soon as a child is likely; start does not wait for it
// (ready does: before a child can create the container, so that a signal
// never ends this process alone with the container half set up); and they
// are never given back: a relayed signal that arrives while no child runs
// (before the first, after one ended) does what it does to a Go program
// that does not catch it (deliver).
type relay struct {
	once  sync.Once
	armed chan struct{} // closed once the signals are caught
	sigs  chan os.Signal
	mu    sync.Mutex
	pid   int // the running child's (0: none); set and cleared under mu
}

func newRelay() *relay {
	return &relay{armed: make(chan struct{}), sigs: make(chan os.Signal, 8)}
}

// arm starts catching the relayed signals in the background; ready waits
// for it. Both do nothing on a nil relay (a Runtime whose Start is not a
// relay's).
func (r *relay) arm() {
	if r != nil {
		r.once.Do(func() { go r.loop() })
	}
}

func (r *relay) loop() {
	signal.Notify(r.sigs, relayed()...)
	close(r.armed)
	for s := range r.sigs {
		r.deliver(s.(syscall.Signal))
	}
}

// deliver passes s on to the child, or, with none running, gives s the
// action it has in a Go program that does not catch it: SIGUSR1 and
// SIGUSR2 none (they stay caught, for the next child); the others end
// this process (s is given back and raised again).
func (r *relay) deliver(s syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.pid > 0:
		_ = syscall.Kill(r.pid, s)
	case s == syscall.SIGUSR1 || s == syscall.SIGUSR2:
	default:
		signal.Reset(s)
		_ = syscall.Kill(os.Getpid(), s)
	}
}

// ready waits until the relayed signals are caught (arm).
func (r *relay) ready() {
	if r != nil {
		r.arm()
		<-r.armed
	}
}

// start runs path with argv and env as a child with this process's
// standard streams and every descriptor it inherited without close-on-exec
// (as exec would pass them: --preserve-fds, socket activation), and
// passes the relayed signals on to it, once ready, until Wait sees it end.
func (r *relay) start(path string, argv, env []string) (rtChild, error) {
	r.arm()
	// Under mu: a signal that arrives while the child is being started
	// is passed on to it, not given its default action here.
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pid != 0 {
		return nil, fmt.Errorf("start %s: low-level runtime %d still running", path, r.pid)
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: stdFiles()})
	if err != nil {
		return nil, err
	}
	r.pid = pid
	return &proc{path: path, pid: pid, relay: r}, nil
}

// stdFiles are this process's standard descriptors for the child: each
// that is open is passed as is, one that is closed stays closed in the
// child (as across exec), instead of failing the start.
func stdFiles() []uintptr {
	files := make([]uintptr, 3)
	for fd := range files {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			files[fd] = ^uintptr(0) // closed in the child
			continue
		}
		files[fd] = uintptr(fd)
	}
	return files
}

// proc is relay.start's child.
type proc struct {
	path  string
	pid   int
	relay *relay
}

func (p *proc) Kill() { _ = syscall.Kill(p.pid, syscall.SIGKILL) }

// Wait waits for the child to end, stops relaying signals to it before it
// is reaped (its pid cannot have been reused while it is a zombie), then
// reaps it.
func (p *proc) Wait() (int, error) {
	var info unix.Siginfo
	err := eintr(func() error { return unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil) })
	p.relay.mu.Lock()
	if p.relay.pid == p.pid {
		p.relay.pid = 0
	}
	p.relay.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("wait for %s: %w", p.path, err)
	}
	var ws syscall.WaitStatus
	if err := eintr(func() error { _, err := syscall.Wait4(p.pid, &ws, 0, nil); return err }); err != nil {
		return 0, fmt.Errorf("wait for %s: %w", p.path, err)
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// eintr calls f until it fails with anything but EINTR.
func eintr(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}
