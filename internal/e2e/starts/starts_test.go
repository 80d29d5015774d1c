package starts

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDuring counts three starts of a copy of /bin/true run three times,
// none of a copy not run, and passes f's error on.
func TestDuring(t *testing.T) {
	data, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skipf("no /bin/true to copy: %v", err)
	}
	dir := t.TempDir()
	prog, other := filepath.Join(dir, "prog"), filepath.Join(dir, "other")
	for _, p := range []string{prog, other} {
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func() error {
		for range 3 {
			if err := exec.Command(prog).Run(); err != nil {
				return err
			}
		}
		return nil
	}
	if n, err := During(prog, run); n != 3 || err != nil {
		t.Errorf("starts of prog: %d, %v; want 3", n, err)
	}
	if n, err := During(other, run); n != 0 || err != nil {
		t.Errorf("starts of a program not run: %d, %v; want 0", n, err)
	}
	boom := errors.New("boom")
	if _, err := During(prog, func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("f's error: %v", err)
	}
	if _, err := During(filepath.Join(dir, "missing"), run); err == nil {
		t.Error("a missing file: no error")
	}
}
