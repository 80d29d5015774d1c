package rootfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(ents) - 1 // the directory's own
}

// TestJournalDescriptors: the journal holds one descriptor per directory
// its entries name, not one per entry, and an attached mount's clone
// passes to the journal instead of being copied; Commit and Rollback
// release them all. (A descriptor table past 64 entries costs an RCU grace
// period per growth: keepDir.)
func TestJournalDescriptors(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			e := newEnv(t)
			r := e.open(t)
			base := openFDs(t)
			for i := range 100 {
				must(t, r.Symlink(fmt.Sprintf("libx%d.so.1.0", i), fmt.Sprintf("/usr/lib/x86_64-linux-gnu/libx%d.so.1", i)))
				must(t, r.Symlink(fmt.Sprintf("libx%d.so.1.0", i), fmt.Sprintf("/usr/local/nvidia/lib64/libx%d.so.1", i)))
			}
			must(t, r.WriteFile("/etc/ld.so.conf.d/nvidia.conf", []byte("/usr/local/nvidia/lib64\n"), 0o644))
			// The journal keeps the directories it created a name in: the
			// root, usr, usr/lib, usr/local, usr/local/nvidia, etc, and the
			// three it made its links and file in.
			if got := openFDs(t) - base; got > 9 {
				t.Errorf("%d descriptors more after 200 links in two directories and a file, want at most 9 (one per directory)", got)
			}
			if commit {
				r.Commit()
			} else {
				must(t, r.Rollback())
				if _, err := os.Lstat(filepath.Join(e.root, "usr")); !os.IsNotExist(err) {
					t.Errorf("rolled back, but /usr is still there: %v", err)
				}
			}
			if got := openFDs(t) - base; got != 0 {
				t.Errorf("%d descriptors left open after the journal ended", got)
			}
		})
	}
	t.Run("mounts", func(t *testing.T) {
		requireRoot(t)
		e := newEnv(t)
		r := e.open(t)
		var sources []*Source
		for i := range 20 {
			src := filepath.Join(e.dir, fmt.Sprintf("libnvidia-x%d.so.580.1", i))
			must(t, os.WriteFile(src, []byte("driver"), 0o644))
			s, err := OpenSource(src, KindFile, []string{"ro", "nosuid", "nodev", "rbind", "rprivate"})
			must(t, err)
			defer s.Close()
			sources = append(sources, s)
		}
		base := openFDs(t)
		for i, s := range sources {
			must(t, r.Attach(s, fmt.Sprintf("/usr/lib/x86_64-linux-gnu/libnvidia-x%d.so.580.1", i)))
		}
		// The directories the journal created names in (the root, usr,
		// usr/lib, the library directory); each clone closed once
		// attached (the journal names the mount by its place and ID).
		if got := openFDs(t) - base; got > 4-len(sources) {
			t.Errorf("%d descriptors after 20 mounts, want at most %d", got, 4-len(sources))
		}
		if n := mountsBelow(t, e.root); n != len(sources) {
			t.Fatalf("%d mounts below the root, want %d", n, len(sources))
		}
		must(t, r.Rollback())
		if got := openFDs(t) - base; got != -len(sources) {
			t.Errorf("%d descriptors after rollback, want %d", got, -len(sources))
		}
		if n := mountsBelow(t, e.root); n != 0 {
			t.Errorf("%d mounts below the root after rollback, want none", n)
		}
		if _, err := os.Lstat(filepath.Join(e.root, "usr")); !os.IsNotExist(err) {
			t.Errorf("rolled back, but /usr is still there: %v", err)
		}
		e.checkHost(t)
	})
}

// mountsBelow counts this process's mounts below dir.
func mountsBelow(t *testing.T, dir string) int {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	n := 0
	for line := range strings.SplitSeq(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			n++
		}
	}
	return n
}
