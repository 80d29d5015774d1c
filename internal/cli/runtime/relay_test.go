package runtime

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestRelay: a relayed signal that this process gets while the low-level
// runtime runs as its child reaches the child (as it would have, had the
// runtime been exec'ed); one that arrives while no child runs has the
// action it has in a Go program that does not catch it: SIGTERM ends the
// process (it is not swallowed), SIGUSR1 is ignored and still relayed to
// a later child.
func TestRelay(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	if os.Getenv("NCTK_RELAY_AFTER") == "1" {
		// In a child of this test: a child started and ended, then
		// SIGTERM to this process must end it.
		rel := newRelay()
		if got, err := mustStart(t, rel, sh, "exit 0").Wait(); err != nil || got != 0 {
			t.Fatalf("child: %d, %v", got, err)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(5 * time.Second)
		t.Fatal("SIGTERM after the child ended was swallowed")
	}

	t.Run("to the child", func(t *testing.T) {
		ready := filepath.Join(t.TempDir(), "ready")
		rel := newRelay()
		// A SIGUSR1 before any child: nothing happens (as in a Go
		// program that does not catch it), and the next child still
		// gets the next one.
		rel.ready()
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		c := mustStart(t, rel, sh, `trap 'exit 42' USR1; : > `+ready+`; while :; do sleep 0.01; done`)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(ready); err == nil {
				break
			}
			if time.Now().After(deadline) {
				c.Kill()
				c.Wait()
				t.Fatal("the child never got ready")
			}
			time.Sleep(time.Millisecond)
		}
		rel.ready() // as the runtime waits before its child may create the container
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		done := make(chan int, 1)
		go func() { s, _ := c.Wait(); done <- s }()
		select {
		case s := <-done:
			if s != 42 {
				t.Fatalf("child ended %d, want 42 (its SIGUSR1 trap)", s)
			}
		case <-time.After(10 * time.Second):
			c.Kill()
			t.Fatal("SIGUSR1 never reached the child")
		}
	})

	t.Run("default after the child", func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestRelay$")
		cmd.Env = append(os.Environ(), "NCTK_RELAY_AFTER=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Fatalf("test process: %v, want killed by SIGTERM\n%s", err, out)
		}
	})
}

func mustStart(t *testing.T, rel *relay, sh, script string) rtChild {
	t.Helper()
	c, err := rel.start(sh, []string{"sh", "-c", script}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
