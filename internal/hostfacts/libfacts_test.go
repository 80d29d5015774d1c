package hostfacts

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// FuzzDecodeLibFacts: no input makes the decoder or a lookup panic, what
// the decoder accepts encodes and decodes back to the same entries, and a
// lookup never answers with another file's facts.
func FuzzDecodeLibFacts(f *testing.F) {
	seed, err := encodeLibFacts([]Lib{{NotLib: true}, {Dev: 1, Ino: 2, Size: 3, Mtime: 4, Ctime: -5, SONAME: "libx.so.1", Flags: 0x303}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(libFactsMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		if tab, err := parseLibFacts(data); err == nil {
			for i := range tab.len() {
				tab.at(i)
				if got, ok := tab.find(tab.id(i)); ok && got.id() != tab.id(i) {
					t.Fatalf("record %d: found another file's facts %+v", i, got)
				}
			}
		}
		libs, err := decodeLibFacts(data)
		if err != nil {
			return
		}
		enc, err := encodeLibFacts(libs)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeLibFacts(enc)
		if err != nil || !slices.Equal(back, libs) {
			t.Fatalf("re-encoded: %v, %d entries of %d", err, len(back), len(libs))
		}
	})
}

// TestLibFactsSearch: a table of many files answers each by binary search
// (without decoding the others), misses a file it does not hold, and a
// record whose name lies outside the string area is no answer.
func TestLibFactsSearch(t *testing.T) {
	var libs []Lib
	for i := range 1000 {
		libs = append(libs, Lib{Dev: uint64(i % 3), Ino: uint64(i), Size: int64(i), Mtime: 7, Ctime: 8,
			SONAME: fmt.Sprintf("lib%d.so.1", i), Flags: 0x303, NotLib: i%10 == 0})
	}
	slices.SortFunc(libs, func(a, b Lib) int { return compareID(a.id(), b.id()) })
	data, err := encodeLibFacts(libs)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := parseLibFacts(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range libs {
		if got, ok := tab.find(want.id()); !ok || got != want {
			t.Fatalf("find %+v: %+v, %v", want.id(), got, ok)
		}
	}
	miss := libs[5].id()
	miss.ctime++
	if _, ok := tab.find(miss); ok {
		t.Error("a changed file is found")
	}
	// Record 0's name length made to run past the string area.
	bad := slices.Clone(data)
	recs := len(bad) - len(tab.strs) - len(tab.recs)
	binary.LittleEndian.PutUint16(bad[recs+48:], 0xffff)
	badTab, err := parseLibFacts(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := badTab.find(libs[0].id()); ok {
		t.Error("a record with a name outside the string area is an answer")
	}
	if _, err := badTab.all(); err == nil {
		t.Error("a malformed record decodes")
	}
}

// TestLibFactsSaveMerges: what a process learns is added to the table it
// opened; past maxLibFacts the table starts again with what was learnt.
func TestLibFactsSaveMerges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi")
	files := t.TempDir()
	var paths []string
	for i := range 3 {
		p := filepath.Join(files, fmt.Sprintf("lib%d.so.1", i))
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	lib := func(i int) ldcache.Library {
		return ldcache.Library{SONAME: fmt.Sprintf("lib%d.so.1", i), Flags: 0x303}
	}
	for i, p := range paths {
		f := OpenLibFacts(dir)
		f.Learn(statOf(t, p), lib(i), true)
		if err := f.Save(); err != nil {
			t.Fatal(err)
		}
	}
	g := OpenLibFacts(dir)
	for i, p := range paths {
		if got, _, found := g.Library(statOf(t, p)); !found || got != lib(i) {
			t.Errorf("%s after three processes: %v, %v", p, got, found)
		}
	}
	// A full table of other files: the next save keeps only what it learnt.
	var full []Lib
	for i := range maxLibFacts {
		full = append(full, Lib{Dev: 1, Ino: uint64(i), SONAME: "libold.so.1"})
	}
	data, err := encodeLibFacts(full)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, libFactsFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	h := OpenLibFacts(dir)
	if h.table.len() != maxLibFacts {
		t.Fatalf("full table: %d records", h.table.len())
	}
	h.Learn(statOf(t, paths[0]), lib(0), true)
	if err := h.Save(); err != nil {
		t.Fatal(err)
	}
	k := OpenLibFacts(dir)
	if k.table.len() != 1 {
		t.Errorf("after a full table: %d records, want 1", k.table.len())
	}
	if _, _, found := k.Library(statOf(t, paths[0])); !found {
		t.Error("what was learnt is not kept")
	}
}

// BenchmarkOpenLibFacts: opening the table and asking it about the 25
// libraries of a spec, by the table's size (one driver install, the
// 1,241 files the tests of one day left, a full table).
func BenchmarkOpenLibFacts(b *testing.B) {
	for _, n := range []int{50, 1241, maxLibFacts} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "cdi")
			f := OpenLibFacts(dir)
			var asked []unix.Stat_t
			for i := range n {
				st := unix.Stat_t{Mode: unix.S_IFREG | 0o644, Dev: 42, Ino: uint64(1000 + i*7), Size: int64(i)}
				f.Learn(&st, ldcache.Library{SONAME: fmt.Sprintf("lib%d.so.1", i), Flags: 0x303}, true)
				if i%(n/25) == 0 && len(asked) < 25 {
					asked = append(asked, st)
				}
			}
			if err := f.Save(); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				g := OpenLibFacts(dir)
				for i := range asked {
					if _, _, found := g.Library(&asked[i]); !found {
						b.Fatal("not found")
					}
				}
			}
		})
	}
}

// decodeLibFacts decodes an encoded table.
func decodeLibFacts(data []byte) ([]Lib, error) {
	t, err := parseLibFacts(data)
	if err != nil {
		return nil, err
	}
	return t.all()
}
