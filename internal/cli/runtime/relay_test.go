package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestSpawn: the child gets the standard streams and exit status as exec
// would give them; a closed standard descriptor stays closed instead of
// failing the start; a signal's death is 128+n.
func TestSpawn(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	for _, tt := range []struct {
		name   string
		script string
		want   int
	}{
		{"status", "exit 7", 7},
		{"signal", "kill -TERM $$", 128 + 15},
		// fd 0 of this test is open: the child sees it.
		{"stdin open", "[ -e /proc/self/fd/0 ] || exit 9", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := run(sh, []string{"sh", "-c", tt.script}, os.Environ())
			if err != nil || got != tt.want {
				t.Errorf("start: %d, %v; want %d", got, err, tt.want)
			}
		})
	}
	// A descriptor inherited without close-on-exec (--preserve-fds, socket
	// activation) reaches the child at its number.
	var p [2]int
	if err := unix.Pipe2(p[:], 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if got, err := run(sh, []string{"sh", "-c", fmt.Sprintf("[ -e /proc/self/fd/%d ]", p[1])}, os.Environ()); err != nil || got != 0 {
		t.Errorf("inherited descriptor %d not passed on: %d, %v", p[1], got, err)
	}
	if _, err := run("/nonexistent/runc", []string{"runc"}, nil); err == nil {
		t.Error("start of a missing binary succeeded")
	}
	// A closed standard descriptor: in a child of this test (fd 0 closed),
	// the relay still starts the program, whose fd 0 is closed too.
	if os.Getenv("NCTK_SPAWN_CLOSED") == "1" {
		os.Stdin.Close()
		got, err := run(sh, []string{"sh", "-c", "[ -e /proc/self/fd/0 ] && exit 9; exit 0"}, os.Environ())
		if err != nil || got != 0 {
			t.Fatalf("start with fd 0 closed: %d, %v", got, err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSpawn$")
	cmd.Env = append(os.Environ(), "NCTK_SPAWN_CLOSED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("with fd 0 closed: %v\n%s", err, out)
	}
}

// run starts path as the runtime does (relay.start) and waits for it.
func run(path string, argv, env []string) (int, error) {
	c, err := newRelay().start(path, argv, env)
	if err != nil {
		return 0, err
	}
	return c.Wait()
}
