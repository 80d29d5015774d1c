package cdispec

import (
	"path"
	"slices"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/hostfacts"
	"github.com/nctk/nctk/internal/ldcache"
	"golang.org/x/sys/unix"
)

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
func indexLibs(idx *specIndex) map[string]hostfacts.Lib {
	libs := map[string]hostfacts.Lib{}
	add := func(p string) {
		if _, done := libs[p]; done {
			return
		}
		if l, ok := hostfacts.InspectLib(p); ok {
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
		if !ok || unix.Stat(p, &st) != nil || !l.SameFile(&st) {
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
		l, ok := hostfacts.InspectLib(p)
		if !ok {
			continue
		}
		if idx.Libs == nil {
			idx.Libs = map[string]hostfacts.Lib{}
		}
		idx.Libs[p] = l
		changed = true
		if !l.NotLib {
			libs[p] = ldcache.Library{SONAME: l.SONAME, Flags: l.Flags}
		}
	}
	return changed
}
