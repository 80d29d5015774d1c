package cdispec

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/ldcache"
)

func statOf(t *testing.T, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// TestLibFacts: what is learnt is kept across processes (Save, then
// OpenLibFacts) by file identity; a file changed since is unknown; an
// untrusted or broken table is no table; nil learns nothing.
func TestLibFacts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi")
	files := t.TempDir()
	lib, other := filepath.Join(files, "libacme.so.1"), filepath.Join(files, "libnot.so")
	for _, p := range []string{lib, other} {
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	acme := ldcache.Library{SONAME: "libacme.so.1", Flags: 0x303}

	f := OpenLibFacts(dir) // no directory yet: empty
	if _, _, found := f.Library(statOf(t, lib)); found {
		t.Fatal("an empty table knows a file")
	}
	f.Learn(statOf(t, lib), acme, true)
	f.Learn(statOf(t, other), ldcache.Library{}, false)
	f.Learn(statOf(t, files), acme, true) // a directory is never recorded
	if err := f.Save(); err != nil {
		t.Fatal(err)
	}

	g := OpenLibFacts(dir)
	if got, isLib, found := g.Library(statOf(t, lib)); !found || !isLib || got != acme {
		t.Errorf("reopened: %v %v %v, want %v", got, isLib, found, acme)
	}
	if _, isLib, found := g.Library(statOf(t, other)); !found || isLib {
		t.Errorf("reopened, not a library: isLib %v, found %v", isLib, found)
	}
	if _, _, found := g.Library(statOf(t, files)); found {
		t.Error("a directory is known")
	}
	// Changed (new ctime and mtime): unknown.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(lib, later, later); err != nil {
		t.Fatal(err)
	}
	if _, _, found := g.Library(statOf(t, lib)); found {
		t.Error("a changed file is still known")
	}
	if err := g.Save(); err != nil { // learnt nothing: no write
		t.Fatal(err)
	}

	table := filepath.Join(dir, libFactsFile)
	good, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	// Readable by others: not trusted.
	if err := os.Chmod(table, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, found := OpenLibFacts(dir).Library(statOf(t, other)); found {
		t.Error("a table others can read is trusted")
	}
	// Broken: no table.
	for _, bad := range [][]byte{good[:len(good)-1], append(append([]byte{}, good...), 0), []byte("{}")} {
		if err := os.WriteFile(table, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(table, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, found := OpenLibFacts(dir).Library(statOf(t, other)); found {
			t.Errorf("a broken table (%d bytes) is used", len(bad))
		}
	}

	var none *LibFacts
	none.Learn(statOf(t, lib), acme, true)
	if _, _, found := none.Library(statOf(t, lib)); found || none.Save() != nil || OpenLibFacts("") != nil {
		t.Error("nil LibFacts is not an empty table")
	}
}

// FuzzDecodeLibFacts: no input makes the decoder panic, and what it
// accepts encodes back to the same bytes.
func FuzzDecodeLibFacts(f *testing.F) {
	f.Add(encodeLibFacts([]cachedLib{{Dev: 1, Ino: 2, Size: 3, Mtime: 4, Ctime: -5, SONAME: "libx.so.1", Flags: 0x303}, {NotLib: true}}))
	f.Add([]byte(libFactsMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		libs, err := decodeLibFacts(data)
		if err != nil {
			return
		}
		back, err := decodeLibFacts(encodeLibFacts(libs))
		if err != nil || len(back) != len(libs) {
			t.Fatalf("re-encoded: %v, %d entries of %d", err, len(back), len(libs))
		}
		for i := range libs {
			if back[i] != libs[i] {
				t.Fatalf("entry %d: %+v, want %+v", i, back[i], libs[i])
			}
		}
	})
}
