package mountsrc

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/nctk/nctk/internal/rootfs"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (open_tree of a device node)")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// nullOpeners are n openers of the host's /dev/null.
func nullOpeners(n int) []Opener {
	open := make([]Opener, n)
	for i := range open {
		open[i] = func() (*rootfs.Source, error) {
			return rootfs.OpenDevice("/dev/null", 1, 3, []string{"ro", "nosuid"})
		}
	}
	return open
}

// TestBatchesProgress: with the journal holding more directories than the
// descriptor room allows, every source is still handed out, each once, in
// batches of MinBatch that are not cut short.
func TestBatchesProgress(t *testing.T) {
	requireRoot(t)
	r, err := rootfs.Open(t.TempDir())
	must(t, err)
	defer r.Rollback()
	for i := range fdTable {
		must(t, r.Symlink("x", fmt.Sprintf("/d%d/link", i)))
	}
	if r.KeptDirs() < fdTable {
		t.Fatalf("journal keeps %d directories, want at least %d", r.KeptDirs(), fdTable)
	}
	b, err := Open(nullOpeners(3*MinBatch + 1))
	must(t, err)
	defer b.Close()
	opened := 0
	host := func(g func() error) error { opened++; return g() }
	seen := map[*rootfs.Source]bool{}
	for i := range b.Len() {
		s, err := b.Source(i, r, host)
		must(t, err)
		if s == nil || seen[s] {
			t.Fatalf("source %d: %v (seen before: %v)", i, s, seen[s])
		}
		seen[s] = true
	}
	// The first batch came with Open; each later one through host.
	if want := (b.Len()+MinBatch-1)/MinBatch - 1; opened != want {
		t.Errorf("%d batches opened through host, want %d", opened, want)
	}
}

// TestBatchesSized: with few descriptors open, the first batch holds what
// the table has room for and no more; the sources of a batch are closed
// once a later one is handed out; an opener's error is returned.
func TestBatchesSized(t *testing.T) {
	requireRoot(t)
	r, err := rootfs.Open(t.TempDir())
	must(t, err)
	defer r.Rollback()
	n := 2 * MaxBatch
	calls := 0
	open := nullOpeners(n)
	for i := range open {
		o := open[i]
		open[i] = func() (*rootfs.Source, error) { calls++; return o() }
	}
	b, err := Open(open)
	must(t, err)
	defer b.Close()
	first := calls
	if first < MinBatch || first > MaxBatch || openDescriptors() > fdTable {
		t.Fatalf("first batch opened %d sources, %d descriptors open; want %d..%d within %d", first, openDescriptors(), MinBatch, MaxBatch, fdTable)
	}
	host := func(g func() error) error { return g() }
	s0, err := b.Source(0, r, host)
	must(t, err)
	if _, err := b.Source(first, r, host); err != nil {
		t.Fatal(err)
	}
	if calls <= first {
		t.Fatalf("source %d handed out without a second batch (%d opens)", first, calls)
	}
	if err := r.Attach(s0, "/x"); err == nil {
		t.Error("a source of an earlier batch was still open")
	}

	boom := errors.New("boom")
	if _, err := Open([]Opener{func() (*rootfs.Source, error) { return nil, boom }}); !errors.Is(err, boom) {
		t.Errorf("Open: %v, want %v", err, boom)
	}
	if b, err := Open(nil); err != nil || b.Len() != 0 {
		t.Errorf("Open(nil) = %v, %v", b, err)
	}
}
