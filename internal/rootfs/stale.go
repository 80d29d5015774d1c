package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// stalePID returns the process ID in the name of a temporary file that
// WriteFile (createTemp) or Symlink (replaceSymlink) creates next to its
// destination — ".<name>.nctk-<pid>-<n>" and ".<name>.nctk-link-<pid>-<n>",
// those a Rollback of WriteFile creates (".<name>.nctk-<pid>-u<n>"), and
// the old object ForceSymlink keeps until Commit
// (".<name>.nctk-old-<pid>-<n>") — and whether name is one: the names
// `^\..+\.nctk-(?:link-|old-)?([0-9]+)-u?[0-9]+$` matches.
func stalePID(name string) (int, bool) {
	// Only the last marker can fit: what follows an earlier one holds the
	// last one's ".", which the digits after a marker never do.
	i := strings.LastIndex(name, tempMarker)
	if i < 2 || name[0] != '.' || strings.IndexByte(name[1:i], '\n') >= 0 {
		// "." and at least one character before the marker, none a
		// newline (which the expression's "." does not match)
		return 0, false
	}
	rest := name[i+len(tempMarker):]
	if r, ok := strings.CutPrefix(rest, "link-"); ok {
		rest = r
	} else if r, ok := strings.CutPrefix(rest, "old-"); ok {
		rest = r
	}
	pid, n, ok := strings.Cut(rest, "-")
	if !ok || !allDigits(pid) || !allDigits(strings.TrimPrefix(n, "u")) {
		return 0, false
	}
	id, err := strconv.Atoi(pid)
	return id, err == nil
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// tempMarker is in every name stalePID accepts.
const tempMarker = ".nctk-"

// staleScan is what a Root's removal of earlier runs' temporaries did: the
// directories it read (container paths), what it removed and what it could
// not.
type staleScan struct {
	read    map[string]bool
	removed []string
	errs    []error
}

// removeStaleIn removes the temporaries of gone processes (removeStaleAt)
// from the directory dirfd (the container path dir), once per Root. The
// Root calls it where an interrupted run of the same work can have left
// some: a directory it is about to write a file into (WriteFile makes a
// temporary every time), and one where a link it is to make finds an entry
// already there (Symlink and ForceSymlink make a temporary, or keep the old
// object, only to replace one; the same name is there again after a run
// killed mid-way). A directory where every link is new is not read: with
// the driver's library directories that is what most creates save.
// Failures are kept for RemovedStale, not returned: the files are inert.
func (r *Root) removeStaleIn(dirfd int, dir string) {
	if r.stale.read[dir] {
		return
	}
	if r.stale.read == nil {
		r.stale.read = make(map[string]bool)
	}
	r.stale.read[dir] = true
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.stale.errs = append(r.stale.errs, r.errorf(dir, fmt.Errorf("read directory: %w", err)))
		return
	}
	removed, err := r.removeStaleAt(fd, dir)
	r.stale.removed = append(r.stale.removed, removed...)
	if err != nil {
		r.stale.errs = append(r.stale.errs, err)
	}
}

// ShareStaleReads makes read the set of directories (container paths)
// whose temporaries count as removed already: the Root skips those and
// adds those it reads. Roots opened one after the other on the same
// container (the hooks of one chain) share one set, so that a large
// directory (an image's library directory, merged by overlayfs) is read
// once.
func (r *Root) ShareStaleReads(read map[string]bool) { r.stale.read = read }

// RemovedStale returns the container paths of the temporaries of gone
// processes this Root removed on its own (see removeStaleIn), and the
// errors of those it could not remove.
func (r *Root) RemovedStale() ([]string, error) {
	return r.stale.removed, errors.Join(r.stale.errs...)
}

// removeStaleAt removes, from the directory fd (opened for reading; closed
// here), the container path cp, the temporary files that a WriteFile or
// Symlink of a process that is gone (killed between creating its temporary
// and renaming it into place) left there, and the objects a ForceSymlink of
// such a process replaced: only names of nctk's own pattern, never a
// directory, only where no process with the pid in the name exists (a live
// process may be another create working in the same root). It returns the
// container paths it removed.
func (r *Root) removeStaleAt(fd int, cp string) ([]string, error) {
	f := os.NewFile(uintptr(fd), cp)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, r.errorf(cp, fmt.Errorf("read directory: %w", err))
	}
	self := os.Getpid()
	var removed []string
	var errs []error
	for _, n := range names {
		pid, ok := stalePID(n)
		if !ok || pid == self || processExists(pid) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if err := unix.Unlinkat(fd, n, 0); err != nil && err != unix.ENOENT {
			errs = append(errs, r.errorf(path.Join(cp, n), fmt.Errorf("remove stale temporary file: %w", err)))
			continue
		}
		removed = append(removed, path.Join(cp, n))
	}
	return removed, errors.Join(errs...)
}

// processExists reports whether a process with pid exists (signal 0; EPERM
// means it exists but belongs to someone else).
func processExists(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}
