package cdispec

import (
	"errors"
	"os"
	"path"
	"slices"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
	"golang.org/x/sys/unix"
)

// cachedLib is what ld.so.cache records about a host library a spec
// bind-mounts (its SONAME and flags, ldcache.Inspect), with the identity
// of the file it was read from: device, inode, size, mtime and ctime of
// the file its host path led to. Writing, replacing or renaming the file
// changes them (ctime cannot be set back), so a file found with the same
// identity holds the same ELF headers.
type cachedLib struct {
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Size   int64  `json:"size"`
	Mtime  int64  `json:"mtime"`
	Ctime  int64  `json:"ctime"`
	SONAME string `json:"soname,omitempty"`
	Flags  int32  `json:"flags"`
	// NotLib: the file is no library ldconfig records
	// (ldcache.ErrNotLibrary).
	NotLib bool `json:"notLib,omitempty"`
}

// identity fills the identity fields of l from st.
func (l *cachedLib) setIdentity(st *unix.Stat_t) {
	l.Dev, l.Ino, l.Size = st.Dev, st.Ino, st.Size
	l.Mtime, l.Ctime = st.Mtim.Nano(), st.Ctim.Nano()
}

// sameFile reports whether st is the file l was read from.
func (l *cachedLib) sameFile(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && l.id() == idOf(st)
}

// libID is a file's identity as cachedLib keeps it.
type libID struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

func (l *cachedLib) id() libID { return libID{l.Dev, l.Ino, l.Size, l.Mtime, l.Ctime} }

func idOf(st *unix.Stat_t) libID {
	return libID{st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()}
}

// libMounts calls f with the host path of each bind mount of e whose file
// name is one ldconfig records (a shared library's).
func libMounts(e *cdispecs.ContainerEdits, f func(hostPath string)) {
	for _, m := range e.Mounts {
		if m != nil && path.IsAbs(m.HostPath) && ldcache.IsLibraryName(path.Base(m.HostPath)) {
			f(m.HostPath)
		}
	}
}

// indexLibs reads the library files the index's edits bind-mount (ELF
// headers only, as the runtime reads them for ld.so.cache); a file that
// cannot be opened or read is left out (a create reads it itself, and
// reports what is wrong).
func indexLibs(idx *specIndex) map[string]cachedLib {
	libs := map[string]cachedLib{}
	add := func(p string) {
		if _, done := libs[p]; done {
			return
		}
		if l, ok := inspectLib(p); ok {
			libs[p] = l
		}
	}
	for i := range idx.Specs {
		libMounts(&idx.Specs[i], add)
	}
	for _, d := range idx.Devices {
		libMounts(&d.Edits, add)
	}
	if len(libs) == 0 {
		return nil
	}
	return libs
}

// inspectLib reads the library at the host path p as the runtime does
// (hostfile's checks, ldcache.Inspect), with its identity; ok is false
// when it cannot be opened or read.
func inspectLib(p string) (cachedLib, bool) {
	fd, err := hostfile.OpenFD(p, hostfile.MaxLibrary)
	if err != nil {
		return cachedLib{}, false
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return cachedLib{}, false
	}
	lib, err := ldcache.Inspect(f, st.Size)
	if err != nil && !errors.Is(err, ldcache.ErrNotLibrary) {
		return cachedLib{}, false
	}
	l := cachedLib{SONAME: lib.SONAME, Flags: lib.Flags, NotLib: err != nil}
	l.setIdentity(&st)
	return l, true
}

// verifiedLibs returns what ld.so.cache records about the library files
// e bind-mounts, by host path, for those the index read and that are the
// same file now (stat, following links as opening the path does); the
// others are not in the result and, unless the index knows them as no
// library (unchanged), are listed in stale.
func (idx *specIndex) verifiedLibs(e *cdispecs.ContainerEdits) (out map[string]ldcache.Library, stale []string) {
	out = map[string]ldcache.Library{}
	libMounts(e, func(p string) {
		if _, done := out[p]; done || slices.Contains(stale, p) {
			return
		}
		l, ok := idx.Libs[p]
		var st unix.Stat_t
		if !ok || unix.Stat(p, &st) != nil || !l.sameFile(&st) {
			stale = append(stale, p)
			return
		}
		if !l.NotLib {
			out[p] = ldcache.Library{SONAME: l.SONAME, Flags: l.Flags}
		}
	})
	return out, stale
}

// refreshLibs reads the library files at the host paths stale into idx
// and adds those now known to libs; it reports whether idx changed.
func (idx *specIndex) refreshLibs(stale []string, libs map[string]ldcache.Library) bool {
	changed := false
	for _, p := range stale {
		l, ok := inspectLib(p)
		if !ok {
			continue
		}
		if idx.Libs == nil {
			idx.Libs = map[string]cachedLib{}
		}
		idx.Libs[p] = l
		changed = true
		if !l.NotLib {
			libs[p] = ldcache.Library{SONAME: l.SONAME, Flags: l.Flags}
		}
	}
	return changed
}
