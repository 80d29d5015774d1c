package runtime

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/e2e"
)

// TestDriverRootSwappedDuringCreates replays issue 13: while the driver
// root was renamed away and back during creates (what a driver upgrade or
// a driver-container restart does to /run/nvidia/driver), creates exited
// 0 with the GPU nodes but some or all driver files missing, silently, and
// others wrote an incomplete config.json. Here a goroutine renames the
// fixture driver root (the config's [nvidia-container-cli] root) away and
// back while the runtime, as its own process, creates containers in a
// loop. Every create must either fail with a one-line error naming the
// driver root, with bundle and rootfs exactly as they were, or succeed
// with exactly the config.json and rootfs of a create made while the root
// was stable: every file the full plan has, every link, the same
// ld.so.cache.
func TestDriverRootSwappedDuringCreates(t *testing.T) {
	k := newKillRig(t)
	fxRoot := k.root
	ref := k.bundle()
	pristine := e2e.TreeState(t, filepath.Join(ref, "rootfs"))
	k.create(ref)
	wantSpec := readFile(t, filepath.Join(ref, "config.json"))
	wantRoot := e2e.TreeState(t, filepath.Join(ref, "rootfs"))
	if n := bytes.Count(wantSpec, []byte(fxRoot+"/")); n < 10 {
		t.Fatalf("a stable create's config.json names only %d driver files", n)
	}
	if _, ok := wantRoot["/etc/ld.so.cache"]; !ok {
		t.Fatalf("a stable create wrote no ld.so.cache: %v", e2e.TreeDiff(wantRoot, pristine))
	}

	// The racer: the root is away for 0–0.3 ms or 0–2 ms, then back for
	// 0–3 ms.
	away := fxRoot + ".away"
	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := os.Rename(fxRoot, away); err != nil {
				t.Errorf("rename away: %v", err)
				return
			}
			awayFor := 300 * time.Microsecond
			if rand.IntN(2) == 0 {
				awayFor = 2 * time.Millisecond
			}
			time.Sleep(time.Duration(rand.Int64N(int64(awayFor))))
			if err := os.Rename(away, fxRoot); err != nil {
				t.Errorf("rename back: %v", err)
				return
			}
			swaps.Add(1)
			time.Sleep(time.Duration(rand.Int64N(int64(3 * time.Millisecond))))
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()

	creates, budget := 200, 30*time.Second
	if testing.Short() {
		creates, budget = 40, 5*time.Second
	}
	var ok, failed int
	reasons := map[string]int{}
	for deadline := time.Now().Add(budget); ok+failed < creates && time.Now().Before(deadline); {
		b := k.bundle()
		before := e2e.TreeState(t, b)
		var out bytes.Buffer
		cmd := k.command(b)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		msg := strings.TrimSpace(out.String())
		if err != nil {
			failed++
			if d := e2e.TreeDiff(e2e.TreeState(t, b), before); len(d) > 0 {
				t.Errorf("create %d failed (%s) and changed the bundle: %v", ok+failed, msg, d)
			}
			if !strings.Contains(msg, fxRoot) || strings.Count(msg, "\n") > 0 {
				t.Errorf("create %d: the error is not one line naming the driver root %s: %q", ok+failed, fxRoot, msg)
			}
			if reasons[swapReason(msg)]++; reasons[swapReason(msg)] == 1 {
				t.Logf("e.g. %s", msg)
			}
			continue
		}
		ok++
		if got := readFile(t, filepath.Join(b, "config.json")); !bytes.Equal(got, wantSpec) {
			t.Errorf("create %d succeeded with a config.json that differs from a stable create's; mounts missing: %v",
				ok+failed, missingMounts(t, got, wantSpec))
		}
		if d := e2e.TreeDiff(e2e.TreeState(t, filepath.Join(b, "rootfs")), wantRoot); len(d) > 0 {
			t.Errorf("create %d succeeded with a rootfs that differs from a stable create's: %v", ok+failed, d)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d creates during %d swaps of the driver root: %d complete, %d failed cleanly %v", ok+failed, swaps.Load(), ok, failed, reasons)
	if ok+failed < 10 {
		t.Fatalf("only %d creates ran", ok+failed)
	}
	if swaps.Load() < 10 {
		t.Fatalf("the root was swapped only %d times", swaps.Load())
	}
}

// swapReason is the part of a create's error that says what happened,
// for the test's summary.
func swapReason(msg string) string {
	for _, r := range []string{"no NVIDIA driver found", "changed while", "vanished", "dynamic linker cache", "update ld.so.cache"} {
		if strings.Contains(msg, r) {
			return r
		}
	}
	if len(msg) > 80 {
		return msg[:80]
	}
	return msg
}

// missingMounts lists the mount sources of the config.json want that got
// lacks.
func missingMounts(t *testing.T, got, want []byte) []string {
	t.Helper()
	sources := func(b []byte) map[string]bool {
		var spec struct{ Mounts []struct{ Source string } }
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatalf("config.json: %v", err)
		}
		out := map[string]bool{}
		for _, m := range spec.Mounts {
			out[m.Source] = true
		}
		return out
	}
	have := sources(got)
	var out []string
	for s := range sources(want) {
		if !have[s] {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}
