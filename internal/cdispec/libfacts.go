package cdispec

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/runcache"
)

// LibFacts are what ld.so.cache records about library files (their SONAME
// and flags, or that ldconfig skips them), keyed by file identity alone
// (device, inode, size, mtime, ctime: see cachedLib), and kept in the CDI
// cache directory for the hooks that add a spec's libraries to a
// container's ld.so.cache (nvidia-cdi-hook update-ldcache). Those are bind
// mounts of the same host files in every container, and a bind-mounted
// file has the identity of the host file: its ELF headers are read once
// per driver install instead of once per container. The same trust rules
// as the resolved-spec cache apply (a directory and a file owned by the
// effective user, no group or other permissions); an untrusted or broken
// file is no cache.
//
// A nil *LibFacts is an empty table that learns nothing.
type LibFacts struct {
	dir   string
	byID  map[libID]cachedLib
	added bool
}

const (
	libFactsMagic   = "nctk-lib-facts\n"
	libFactsVersion = 1
	libFactsFile    = "lib-facts.bin"
	// maxLibFacts bounds the table: a host with more library files than
	// this starts a new one (what the current run learnt).
	maxLibFacts = 4096
)

// DefaultCacheDir is the CDI cache directory (the resolved-spec caches,
// the library facts) in the default run cache directory
// (runcache.DefaultDir); "" when there is none.
func DefaultCacheDir(getenv func(string) string) string {
	return CacheDirIn(runcache.DefaultDir(getenv))
}

// CacheDirIn is the CDI cache directory in the run cache directory
// runDir: its "cdi" subdirectory; "" for "".
func CacheDirIn(runDir string) string {
	if runDir == "" {
		return ""
	}
	return filepath.Join(runDir, "cdi")
}

// OpenLibFacts reads the table in cacheDir; "" (no cache) gives nil.
func OpenLibFacts(cacheDir string) *LibFacts {
	if cacheDir == "" {
		return nil
	}
	f := &LibFacts{dir: cacheDir, byID: map[libID]cachedLib{}}
	data, ok := readTrusted(cacheDir, filepath.Join(cacheDir, libFactsFile))
	if !ok {
		return f
	}
	if libs, err := decodeLibFacts(data); err == nil {
		for _, l := range libs {
			f.byID[l.id()] = l
		}
	}
	return f
}

// Library returns what the table knows about the regular file st
// describes: found is false when it knows nothing; isLib is false for a
// file ldconfig skips.
func (f *LibFacts) Library(st *unix.Stat_t) (lib ldcache.Library, isLib, found bool) {
	if f == nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ldcache.Library{}, false, false
	}
	l, ok := f.byID[idOf(st)]
	if !ok {
		return ldcache.Library{}, false, false
	}
	return ldcache.Library{SONAME: l.SONAME, Flags: l.Flags}, !l.NotLib, true
}

// Learn records what inspecting the regular file st describes found.
func (f *LibFacts) Learn(st *unix.Stat_t, lib ldcache.Library, isLib bool) {
	if f == nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	l := cachedLib{SONAME: lib.SONAME, Flags: lib.Flags, NotLib: !isLib}
	l.setIdentity(st)
	if old, ok := f.byID[idOf(st)]; ok && old == l {
		return
	}
	if len(f.byID) >= maxLibFacts {
		f.byID = map[libID]cachedLib{}
	}
	f.byID[idOf(st)] = l
	f.added = true
}

// Save writes the table back when it learnt something (atomically, mode
// 0600, not synced: a lost file costs a few ELF reads). Hooks running at
// once may each write theirs; the last one stays, and what the others
// learnt is learnt again.
func (f *LibFacts) Save() error {
	if f == nil || !f.added {
		return nil
	}
	if err := checkCacheDir(f.dir, true); err != nil {
		return err
	}
	libs := slices.SortedFunc(maps.Values(f.byID), func(a, b cachedLib) int {
		if a.Dev != b.Dev {
			return cmp.Compare(a.Dev, b.Dev)
		}
		return cmp.Compare(a.Ino, b.Ino)
	})
	if err := atomicfile.WriteFile(filepath.Join(f.dir, libFactsFile), encodeLibFacts(libs), atomicfile.Options{Mode: 0o600}); err != nil {
		return fmt.Errorf("write library facts: %w", err)
	}
	f.added = false
	return nil
}

func encodeLibFacts(libs []cachedLib) []byte {
	var w cacheWriter
	w.b = append(make([]byte, 0, 64*len(libs)+32), libFactsMagic...)
	w.int(libFactsVersion)
	w.n(len(libs), false)
	for _, l := range libs {
		w.lib(l)
	}
	return w.b
}

func decodeLibFacts(data []byte) ([]cachedLib, error) {
	r, err := newCacheReader(data, libFactsMagic, "library facts file")
	if err != nil {
		return nil, err
	}
	if v := r.int(); r.err == nil && v != libFactsVersion {
		return nil, fmt.Errorf("library facts version %d, want %d", v, libFactsVersion)
	}
	n, _ := r.n()
	libs := make([]cachedLib, n)
	for i := range libs {
		libs[i] = r.lib()
	}
	if err := r.finish("library facts file"); err != nil {
		return nil, err
	}
	return libs, nil
}
