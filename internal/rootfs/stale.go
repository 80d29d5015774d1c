package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// staleTemp matches the names of the temporary files WriteFile (createTemp)
// and Symlink (replaceSymlink) create next to their destination:
// ".<name>.nctk-<pid>-<n>" and ".<name>.nctk-link-<pid>-<n>", those a
// Rollback of WriteFile creates (".<name>.nctk-<pid>-u<n>"), and the old
// object ForceSymlink keeps until Commit (".<name>.nctk-old-<pid>-<n>").
var staleTemp = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\..+\.nctk-(?:link-|old-)?([0-9]+)-u?[0-9]+$`)
})

// tempMarker is in every name staleTemp matches: names without it are
// skipped before the expression is compiled or run (each create lists the
// directories it writes into).
const tempMarker = ".nctk-"

// RemoveStaleTemps removes, from the directory dir inside the root, the
// temporary files that a WriteFile or Symlink of a process that is gone
// (killed between creating its temporary and renaming it into place) left
// there, and the objects a ForceSymlink of such a process replaced: only
// names of nctk's own pattern, never a directory, only where no process
// with the pid in the name exists (a live process may be another create
// working in the same root). The directory is reached
// inside the root; a missing directory is nothing to do. It returns the
// container paths it removed.
func (r *Root) RemoveStaleTemps(dir string) ([]string, error) {
	cp, err := clean(dir)
	if err != nil {
		return nil, r.errorf(dir, err)
	}
	fd, err := r.resolve(cp, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, r.errorf(cp, err)
	}
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
		if !strings.Contains(n, tempMarker) {
			continue
		}
		m := staleTemp().FindStringSubmatch(n)
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == self || processExists(pid) {
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
