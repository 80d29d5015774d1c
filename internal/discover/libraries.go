package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
)

// tlsMinOSVersion is the kernel version (2.3.99) in the ELF ABI note that
// marks the new-TLS-ABI build of libnvidia-tls; NVIDIA's CLI only takes
// that one.
const tlsMinOSVersion = 2<<16 | 3<<8 | 99

// libSlot is one (class, group, prefix) the cache is searched for.
type libSlot struct {
	class  ldcache.Class
	group  caps.Capability
	prefix string
	real   string // the selected file (in-root path), "" if none
	flags  int32  // the selecting cache entry's flags (ldconfig's for real)
	other  string // a file of another driver version, for the mismatch error
}

// soPrefix returns the part of an ld.so.cache key up to and including its
// first ".so" ("libcuda.so.1" → "libcuda.so"). Every name in NVIDIA's
// library lists ends with its only ".so", so "key has prefix name" is
// exactly "soPrefix(key) == name", which lets one pass over the cache find
// every library with a map lookup per entry.
func soPrefix(key string) string {
	i := strings.Index(key, ".so")
	if i < 0 {
		return ""
	}
	return key[:i+3]
}

// libraries reads the root's ld.so.cache and selects, per capability group
// and per library name, the driver's own file: the first cache entry (in
// the cache's order, which is the loader's preference) whose value
// resolves inside the root to a file named *.so.<driver version>.
// NVIDIA's CLI lets a later entry override an earlier one ("selecting X
// over Y"); the two differ only when two different files of the driver's
// version are in the cache under one name, and then nctk takes the one the
// dynamic loader would load.
func (x *discoverer) libraries() error {
	cachePath := x.opts.LdCache
	if cachePath == "" {
		cachePath = DefaultLdCache
	}
	if !strings.HasPrefix(cachePath, "/") {
		cachePath = "/" + cachePath
	}
	// Slots in NVIDIA's order: 64-bit groups, then 32-bit groups. Entries
	// are selected by the exact architecture flag of this machine's 64-bit
	// and 32-bit ABIs (x86-64/i386, AArch64/armhf, ppc64le), as NVIDIA does.
	// With Options.Caps, only the groups it selects (and the core
	// libraries, 64-bit) get slots: nothing else is resolved or read.
	wanted := func(ldcache.Class, caps.Capability, string) bool { return true }
	if sel := x.opts.Caps; sel != nil {
		groups := sel.LibraryCapabilities()
		wanted = func(class ldcache.Class, g caps.Capability, p string) bool {
			if class == ldcache.Class64 && (p == "libnvidia-ml.so" || p == "libcuda.so") {
				return true
			}
			return slices.Contains(groups, g) && (class == ldcache.Class64 || sel.Has(caps.Compat32))
		}
	}
	var slots []*libSlot
	index := map[uint32]map[string]*libSlot{}
	byClass := map[ldcache.Class]map[string]*libSlot{}
	for _, class := range []ldcache.Class{ldcache.Class64, ldcache.Class32} {
		arch, ok := ldcache.HostArch(class)
		if !ok {
			continue
		}
		index[arch] = map[string]*libSlot{}
		byClass[class] = index[arch]
		seen := map[string]bool{} // a name belongs to its first group
		for _, g := range caps.LibraryGroupOrder() {
			for _, p := range caps.Libraries(g) {
				if seen[p] {
					continue
				}
				seen[p] = true
				if !wanted(class, g, p) {
					continue
				}
				s := &libSlot{class: class, group: g, prefix: p}
				slots = append(slots, s)
				index[arch][p] = s
			}
		}
	}

	// The cache is read keeping only the entries of the names looked up
	// (every slot's, and the EGL platform libraries graphics looks up): a
	// host's cache lists thousands of other libraries.
	x.ldcache = x.root.host(cachePath)
	realCache, err := x.root.resolve(cachePath)
	if err != nil {
		return &LdCacheError{Path: x.root.host(cachePath), Root: x.root.root, Err: x.clean(unwrapPathErr(err))}
	}
	names := make(map[string]bool, len(slots)+len(eglPlatformLibs))
	for _, s := range slots {
		names[s.prefix] = true
	}
	for _, p := range eglPlatformLibs {
		names[p] = true
	}
	c, total, err := x.loadCache(realCache, func(key string) bool { return names[soPrefix(key)] })
	if err != nil {
		return &LdCacheError{Path: x.root.host(cachePath), Root: x.root.root, Err: x.clean(unwrapPathErr(err))}
	}
	x.cache = c

	version := x.d.Version
	taken := map[string]bool{}
	for _, e := range c.Entries {
		if !e.IsELF() {
			continue
		}
		byName, ok := index[e.Arch()]
		if !ok {
			continue
		}
		s, ok := byName[soPrefix(e.Key)]
		if !ok || s.real != "" {
			continue
		}
		real, err := x.root.resolve(e.Value)
		if err != nil {
			x.log.Debug("skipping unresolvable cache entry", "key", e.Key, "value", e.Value, "err", err)
			continue
		}
		if !baseHasVersion(real, version) {
			if s.other == "" {
				s.other = real
			}
			x.log.Debug("skipping library of another driver version", "path", real, "want", version)
			continue
		}
		if s.prefix == "libnvidia-tls.so" {
			// ldconfig no longer records the ABI note in the cache
			// (OSVersion is 0), so read it from the file.
			v := e.OSVersion
			if v == 0 {
				v, _ = readABITag(x.root.loc(real), &x.elfBuf)
			}
			if v < tlsMinOSVersion {
				x.log.Debug("skipping library without the new TLS ABI note", "path", real)
				continue
			}
		}
		if taken[real] {
			continue
		}
		taken[real] = true
		s.real, s.flags = real, e.Flags
		x.log.Debug("selecting library", "path", real, "name", s.prefix, "class", e.Class().String())
	}

	if err := x.checkLibraryVersion(byClass[ldcache.Class64], total); err != nil {
		return err
	}
	for name, s := range byClass[ldcache.Class64] {
		if s.real == "" && s.other != "" && (name == "libcuda.so" || name == "libnvidia-ml.so") {
			if x.d.otherVersion == nil {
				x.d.otherVersion = map[string]string{}
			}
			x.d.otherVersion[name] = x.root.host(s.other)
		}
	}

	for _, s := range slots {
		if s.real == "" {
			if s.class == ldcache.Class32 {
				x.log.Debug("missing compat32 library " + s.prefix)
			} else {
				x.warn("missing library %s", s.prefix)
			}
			continue
		}
		host := x.root.host(s.real)
		soname, err := readSONAME(x.root.loc(s.real), &x.elfBuf)
		if err != nil {
			x.warn("%v", err)
		}
		x.d.Libraries = append(x.d.Libraries, File{
			Name:       s.prefix,
			Capability: s.group,
			Path:       s.real,
			HostPath:   host,
			SONAME:     soname,
			DevLink:    x.devLink(s.real, soname),
			CacheFlags: s.flags,
			Compat32:   s.class == ldcache.Class32,
		})
		if dir := path.Dir(s.real); !slices.Contains(x.d.LibDirs, dir) {
			x.d.LibDirs = append(x.d.LibDirs, dir)
		}
	}
	return nil
}

// loadCache reads and parses the ld.so.cache at the in-root path real (as
// hostfile.Open and ldcache.ReadFiltered do for a path), keeping the
// entries whose key keep accepts; total counts them all.
func (x *discoverer) loadCache(real string, keep func(string) bool) (c *ldcache.Cache, total int, err error) {
	l := x.root.loc(real)
	f, err := hostfile.OpenAt(l.dirfd, l.name, l.host, ldcache.MaxSize)
	if err != nil {
		return nil, 0, fmt.Errorf("ld.so.cache: %w", err)
	}
	defer f.Close()
	c, total, err = ldcache.ReadFiltered(f, keep)
	if err != nil {
		return nil, 0, fmt.Errorf("ld.so.cache %s: %w", l.host, err)
	}
	return c, total, nil
}

// devLink returns the name of the library real's development link (libX.so
// for libX.so.1 or libX.so.<version>) when the driver root has that name
// as a symlink next to the library, "" otherwise; it is the SONAME's (or,
// without one, the file's) name up to ".so".
func (x *discoverer) devLink(real, soname string) string {
	name := soname
	if name == "" {
		name = path.Base(real)
	}
	i := strings.Index(name, ".so.")
	if i < 0 {
		return ""
	}
	link := name[:i+len(".so")]
	if res := x.root.stat(path.Join(path.Dir(real), link)); res.err != nil || res.mode != fs.ModeSymlink {
		return ""
	}
	return link
}

// checkLibraryVersion sets LibraryVersion from the core libraries
// (libnvidia-ml, libcuda) and reports the "Driver/library version
// mismatch" when they exist only for another driver version.
func (x *discoverer) checkLibraryVersion(slots64 map[string]*libSlot, entries int) error {
	var other string
	for _, name := range []string{"libnvidia-ml.so", "libcuda.so"} {
		s := slots64[name]
		if s == nil {
			continue
		}
		if s.real != "" {
			x.d.LibraryVersion = x.d.Version
			return nil
		}
		if other == "" {
			other = s.other
		}
	}
	if other != "" {
		return &VersionMismatchError{
			Module:      x.d.Version,
			ModulePath:  x.procPath("/proc/driver/nvidia/version"),
			Library:     libraryVersion(other),
			LibraryPath: x.root.host(other),
		}
	}
	x.warn("no NVIDIA driver libraries (libnvidia-ml.so, libcuda.so) in the dynamic linker cache %s (%d entries): "+
		"is the driver's user-space installed under %s and ldconfig run?", x.ldcache, entries, x.root.root)
	return nil
}

// libraryVersion returns the version in a library file name
// ("…/libcuda.so.535.261.03" → "535.261.03"), "" if there is none.
func libraryVersion(p string) string {
	b := path.Base(p)
	i := strings.Index(b, ".so.")
	if i < 0 {
		return ""
	}
	return b[i+4:]
}

// unwrapPathErr strips the layers that repeat the path an error is about
// (*fs.PathError, the ldcache package's "ld.so.cache PATH: …" prefix), so
// that LdCacheError names the path once.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
