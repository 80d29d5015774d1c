// Package mountns runs Go code inside another process's mount namespace
// (a container's) on one dedicated OS thread, without cgo or a re-exec:
// the --gpus hook's configure and the runtime's work in a created
// container use it.
package mountns

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Thread is an OS thread that has joined another mount namespace and runs
// the functions given to Do there, one at a time.
//
// setns(CLONE_NEWNS) fails with EINVAL when the calling thread shares its
// filesystem information (root, cwd, umask: the kernel's fs_struct) with
// other threads, and every thread of a Go program does (the runtime creates
// its threads with CLONE_FS). The thread therefore first unshares CLONE_FS,
// which gives it a private copy, and then joins the namespace. It stays
// locked to its goroutine for its whole life and is never handed back to
// the scheduler: when the goroutine returns while still locked, the runtime
// terminates the thread. Threads the runtime creates while this one is
// locked are cloned by the runtime's template thread, not by this one, so
// no other thread ever inherits the container's namespace.
type Thread struct {
	work chan func()
	done chan struct{}
}

// Enter starts a thread in the mount namespace nsfd refers to
// (an open /proc/PID/ns/mnt).
func Enter(nsfd int) (*Thread, error) {
	t := &Thread{work: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go t.run(nsfd, ready, nil)
	if err := <-ready; err != nil {
		<-t.done
		return nil, err
	}
	return t, nil
}

// run is the thread's goroutine. It never uses the process's main thread:
// /proc/self shows the main thread's namespaces and root to every thread,
// and the runtime parks rather than ends a main thread left locked, so it
// would stay in the container's namespace for the life of the process. A
// goroutine that lands there hands over to a new one (which cannot be
// scheduled on this thread while it is locked here) and leaves unchanged.
func (t *Thread) run(nsfd int, ready chan<- error, locked chan<- struct{}) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		next := make(chan struct{})
		go t.run(nsfd, ready, next)
		<-next
		runtime.UnlockOSThread()
		return
	}
	if locked != nil {
		close(locked)
	}
	defer close(t.done)
	// No UnlockOSThread from here on: this thread must die with the goroutine.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		ready <- fmt.Errorf("unshare filesystem information: %w", err)
		return
	}
	if err := unix.Setns(nsfd, unix.CLONE_NEWNS); err != nil {
		ready <- fmt.Errorf("join mount namespace: %w", err)
		return
	}
	ready <- nil
	for f := range t.work {
		f()
	}
}

// Do runs f on the thread and returns its error.
func (t *Thread) Do(f func() error) error {
	return t.DoHost(func(func(func() error) error) error { return f() })
}

// DoHost is Do for an f that needs work done on the host's side: host(g)
// runs g on the calling goroutine, in the caller's mount namespace (never
// on the namespace thread, which runs only its own goroutine), and returns
// its error.
func (t *Thread) DoHost(f func(host func(func() error) error) error) error {
	if t == nil {
		return errors.New("mount namespace thread not running")
	}
	type call struct {
		g    func() error
		done chan error
	}
	errc := make(chan error, 1)
	calls := make(chan call)
	t.work <- func() {
		errc <- f(func(g func() error) error {
			c := call{g, make(chan error, 1)}
			calls <- c
			return <-c.done
		})
	}
	for {
		select {
		case err := <-errc:
			return err
		case c := <-calls:
			c.done <- c.g()
		}
	}
}

// Close ends the thread (and with it the thread's namespace membership).
func (t *Thread) Close() {
	if t == nil {
		return
	}
	close(t.work)
	<-t.done
}
