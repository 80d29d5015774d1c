package cdispec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/hostfacts"
	"github.com/nctk/nctk/internal/ldcache"
)

// The resolved-spec cache: what ResolveCached needs of the spec files (each
// fully-qualified device name with its edits and its spec's edits, after
// the CDI library has loaded, validated and prioritised the files), stored
// in one file per list of spec directories, keyed on the identity of the
// spec files. A new process per container (the runtime) then reads one
// small file instead of parsing and validating every spec. The file also
// holds what ld.so.cache records about the shared libraries the specs
// bind-mount (SONAME and flags, by host path), each with the identity of
// the file it was read from (libcache.go): a create whose library files
// are unchanged reads no ELF header, and one that finds a file changed
// reads it and rewrites the cache file.
//
// The key is a hash of, per directory in order: the directory's own
// dev/ino/mtime/ctime (or that it is absent), then every entry's name with
// the dev/ino/mode/size/mtime/ctime of what it resolves to. Adding,
// removing, renaming, replacing or writing a spec file changes it. It is
// taken before the specs are loaded and again after; the index is stored
// only when both agree (no change during the load).
//
// The cache directory is trusted only when it is a directory (not a link)
// owned by the effective user with no group or other permissions, and a
// cache file only when it is a regular file (not followed through a link)
// with the same owner and no group or other permissions; anything else is
// not read and not written. Files are written with internal/atomicfile,
// mode 0600.

// specCacheVersion changes whenever the cache file's format or meaning
// changes.
const specCacheVersion = 3

// maxSpecCache bounds the cache file read.
const maxSpecCache = 64 << 20

// specIndex is a cache file: what ResolveCached needs, decoded in one pass.
type specIndex struct {
	Version int    `json:"version"`
	Key     string `json:"key"`
	// Specs are the spec-level container edits of the loaded specs.
	Specs []cdispecs.ContainerEdits `json:"specs"`
	// Devices are the resolvable device names, fully qualified.
	Devices map[string]indexedDevice `json:"devices"`
	// Errors are the load errors (specErrors), for UnresolvedError.
	Errors []string `json:"errors,omitempty"`
	// Libs are what ld.so.cache records about the shared libraries the
	// specs bind-mount (by host path), with the identity of each file when
	// it was read: a create that finds the file unchanged reads no ELF
	// header (see hostfacts.Lib).
	Libs map[string]hostfacts.Lib `json:"libs,omitempty"`
}

// indexedDevice is one device: the index of its spec in specIndex.Specs
// and its own container edits.
type indexedDevice struct {
	Spec  int                     `json:"spec"`
	Edits cdispecs.ContainerEdits `json:"edits"`
}

// buildIndex loads the specs of dirs with the CDI library (its priority
// and conflict rules) and returns what ResolveCached needs of them.
func buildIndex(dirs []string) (*specIndex, error) {
	c, err := newCache(dirs)
	if err != nil {
		return nil, err
	}
	idx := &specIndex{Version: specCacheVersion, Devices: map[string]indexedDevice{}, Errors: specErrors(c)}
	specNo := map[*pkgcdi.Spec]int{}
	for _, n := range c.ListDevices() {
		d := c.GetDevice(n)
		if d == nil {
			continue
		}
		s := d.GetSpec()
		i, ok := specNo[s]
		if !ok {
			i = len(idx.Specs)
			specNo[s] = i
			idx.Specs = append(idx.Specs, s.ContainerEdits)
		}
		idx.Devices[n] = indexedDevice{Spec: i, Edits: d.ContainerEdits}
	}
	// The edits as a cache hit gives them: a copy through the cache
	// format (the spec files' entries verbatim, nothing shared with the
	// library's cache).
	_, back, err := encodeChecked(idx)
	return back, err
}

// resolve merges the edits of names as ResolveCached does: each spec's edits
// once, at the first of its devices, then each device's own. The result
// shares idx's entries.
func (idx *specIndex) resolve(names, dirs []string) (*cdispecs.ContainerEdits, error) {
	edits := &pkgcdi.ContainerEdits{ContainerEdits: &cdispecs.ContainerEdits{}}
	seen := map[int]bool{}
	var missing []string
	for _, n := range names {
		d, ok := idx.Devices[n]
		if !ok || d.Spec < 0 || d.Spec >= len(idx.Specs) {
			if !slices.Contains(missing, n) {
				missing = append(missing, n)
			}
			continue
		}
		if !seen[d.Spec] {
			seen[d.Spec] = true
			edits.Append(&pkgcdi.ContainerEdits{ContainerEdits: &idx.Specs[d.Spec]})
		}
		edits.Append(&pkgcdi.ContainerEdits{ContainerEdits: &d.Edits})
	}
	if len(missing) > 0 {
		return nil, &UnresolvedError{Devices: missing, Dirs: dirs, SpecErrors: idx.Errors, Stale: staleFor(missing, dirs)}
	}
	return edits.ContainerEdits, nil
}

// cachedIndex is the index of the specs in specDirs: the cache file's when
// it is there and current, else built (and stored, with cache set, for
// the identity key).
func cachedIndex(specDirs []string, cacheDir string) (idx *specIndex, key string, cache bool, err error) {
	if cacheDir != "" {
		key, err = specDirsKey(specDirs)
		cache = err == nil
	}
	if cache {
		idx = loadIndex(cacheDir, specDirs, key)
	}
	if idx == nil {
		if idx, err = buildIndex(specDirs); err != nil {
			return nil, "", false, err
		}
		if cache {
			idx.Libs = indexLibs(idx)
			if after, err := specDirsKey(specDirs); err == nil && after == key {
				idx.Key = key
				_ = storeIndex(cacheDir, specDirs, idx) // a cache that cannot be written is no cache
			}
		}
	}
	return idx, key, cache, nil
}

// MountsCached returns every mount of the specs in specDirs (their own
// edits' and their devices'), read as ResolveCached reads them: what an
// engine that applied one of these specs put in a config.json.
func MountsCached(specDirs []string, cacheDir string) ([]*cdispecs.Mount, error) {
	if len(specDirs) == 0 {
		specDirs = DefaultSpecDirs()
	}
	idx, _, _, err := cachedIndex(specDirs, cacheDir)
	if err != nil {
		return nil, err
	}
	var out []*cdispecs.Mount
	for i := range idx.Specs {
		out = append(out, idx.Specs[i].Mounts...)
	}
	for _, d := range idx.Devices {
		out = append(out, d.Edits.Mounts...)
	}
	return out, nil
}

// specDirsKey returns the identity of the spec files in dirs (see the
// cache's description above), hashed.
func specDirsKey(dirs []string) (string, error) {
	var b strings.Builder
	b.WriteString("v" + strconv.Itoa(specCacheVersion) + "\n")
	for _, dir := range dirs {
		fmt.Fprintf(&b, "dir %q ", dir)
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				b.WriteString("absent\n")
				continue
			}
			return "", fmt.Errorf("spec directory %s: %w", dir, err)
		}
		writeStat(&b, &st)
		ents, err := os.ReadDir(dir)
		if err != nil {
			return "", fmt.Errorf("spec directory %s: %w", dir, err)
		}
		for _, e := range ents {
			fmt.Fprintf(&b, "  %q ", e.Name())
			if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
				fmt.Fprintf(&b, "error %q\n", err.Error())
				continue
			}
			writeStat(&b, &st)
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:]), nil
}

func writeStat(b *strings.Builder, st *syscall.Stat_t) {
	fmt.Fprintf(b, "%d %d %o %d %d.%d %d.%d\n", st.Dev, st.Ino, st.Mode, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// specCachePath is the cache file for dirs in cacheDir.
func specCachePath(cacheDir string, dirs []string) string {
	sum := sha256.Sum256([]byte(strings.Join(dirs, "\x00")))
	return filepath.Join(cacheDir, "cdi-"+hex.EncodeToString(sum[:12])+".bin")
}

// loadIndex reads the cache file for dirs when it is trusted and its key
// is key; nil otherwise.
func loadIndex(cacheDir string, dirs []string, key string) *specIndex {
	data, ok := hostfacts.ReadTrusted(cacheDir, specCachePath(cacheDir, dirs), maxSpecCache)
	if !ok {
		return nil
	}
	idx, err := decodeIndex(data)
	if err != nil || idx.Version != specCacheVersion || idx.Key != key || idx.Devices == nil {
		return nil
	}
	return idx
}

// storeIndex writes idx as the cache file for dirs (atomically, mode
// 0600, not synced: a lost file only costs a new load).
func storeIndex(cacheDir string, dirs []string, idx *specIndex) error {
	if err := hostfacts.CheckDir(cacheDir, true); err != nil {
		return err
	}
	data, err := encodeIndex(idx)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(specCachePath(cacheDir, dirs), data, atomicfile.Options{Mode: 0o600}); err != nil {
		return fmt.Errorf("write CDI spec cache: %w", err)
	}
	return nil
}

// ResolveCached resolves the CDI device names (fully qualified,
// vendor/class=name) against the spec files in specDirs (nil means
// DefaultSpecDirs; later directories take precedence) and returns the
// container edits they make, merged as the CDI library's InjectDevices
// merges them: the containerEdits of each spec once, at the first of its
// devices, then each device's own. The edits are the spec files' entries,
// verbatim (carried through their JSON encoding, as the resolved-spec
// cache holds them); applying them (ocispec.Apply, with
// the library's editor) gives what InjectDevices gives. A name that is not
// fully qualified or that no spec defines is an error naming it and the
// directories searched; for the latter (an *UnresolvedError) the loaded
// specs of its kind are then compared with the live system (CheckStale),
// and the stale ones are named with what differs and the command that
// rewrites them.
//
// The resolved-spec cache in cacheDir (see above) is used when cacheDir
// is not "": when its file for specDirs is trusted and its key matches the
// spec files as they are now, the edits come from it and no spec file is
// read; otherwise the specs are loaded and the cache file is written for
// the next call, with the same edits and errors either way (the CDI
// library's priority and conflict rules decided what the cache holds). A
// cacheDir that cannot be used (see hostfacts.CheckDir), and any failure to
// write the cache, only mean no caching.
//
// It also returns what ld.so.cache records about the library files the
// edits bind-mount, by host path, for those the resolved-spec cache read
// and that are unchanged (specIndex.verifiedLibs; without a cache, each is
// read here): the runtime then reads no ELF header of its own.
func ResolveCached(names, specDirs []string, cacheDir string) (*cdispecs.ContainerEdits, map[string]ldcache.Library, error) {
	if len(specDirs) == 0 {
		specDirs = DefaultSpecDirs()
	}
	if err := checkNames(names); err != nil {
		return nil, nil, err
	}
	idx, key, cache, err := cachedIndex(specDirs, cacheDir)
	if err != nil {
		return nil, nil, fmt.Errorf("inject CDI devices: %w", err)
	}
	e, err := idx.resolve(names, specDirs)
	if err != nil {
		return nil, nil, err
	}
	known, stale := idx.verifiedLibs(e)
	// Library files changed since the index read them (a driver update
	// that left the spec files as they were): read again once, and kept
	// for the next create.
	if len(stale) > 0 && idx.refreshLibs(stale, known) && cache && idx.Key == key {
		_ = storeIndex(cacheDir, specDirs, idx)
	}
	return e, known, nil
}
