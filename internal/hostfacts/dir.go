// Package hostfacts keeps what nctk learnt about host files, by the
// files' identity, in the CDI cache directory (/run/nctk/cdi): what each
// library's ELF headers say (LibFacts) and the host ldconfig's built-in
// directories (LdconfigSystemDirs). The hooks of every create read it,
// so it depends on no CDI or OCI library: nvidia-cdi-hook's binary links
// this package and not the CDI library.
//
// Its files are trusted only in a directory and as files owned by the
// effective user that grant the group and others nothing (CheckDir,
// ReadTrusted); anything else is no cache. The resolved-spec caches of
// package cdispec live in the same directory under the same rules.
package hostfacts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/runcache"
)

// maxFile bounds the files of this package read.
const maxFile = 64 << 20

// DefaultDir is the CDI cache directory (the resolved-spec caches, the
// library facts, the ldconfig directories) in the default run cache
// directory (runcache.DefaultDir); "" when there is none.
func DefaultDir(getenv func(string) string) string {
	return DirIn(runcache.DefaultDir(getenv))
}

// DirIn is the CDI cache directory in the run cache directory runDir:
// its "cdi" subdirectory; "" for "".
func DirIn(runDir string) string {
	if runDir == "" {
		return ""
	}
	return filepath.Join(runDir, "cdi")
}

// trustedOwner checks that st belongs to the effective user and grants
// the group and others nothing.
func trustedOwner(st *syscall.Stat_t) bool {
	return int(st.Uid) == os.Geteuid() && st.Mode&0o077 == 0
}

// CheckDir reports whether dir may be used: a directory, not a link,
// owned by the effective user, mode 0700 or stricter. With create, a
// missing directory is created (mode 0700), its parent, the run cache
// directory, made and checked first (runcache.Open: /run/nctk is gone
// after a boot, and where an engine applies the specs no nctk runtime
// makes it).
func CheckDir(dir string, create bool) error {
	var st syscall.Stat_t
	err := syscall.Lstat(dir, &st)
	if errors.Is(err, syscall.ENOENT) && create {
		if _, why := runcache.Open(filepath.Dir(dir)); why != "" {
			return fmt.Errorf("CDI spec cache directory: %s", why)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("CDI spec cache directory: %w", err)
		}
		err = syscall.Lstat(dir, &st)
	}
	if err != nil {
		return fmt.Errorf("CDI spec cache directory %s: %w", dir, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || !trustedOwner(&st) {
		return fmt.Errorf("CDI spec cache directory %s not used: want a directory owned by uid %d with mode 0700", dir, os.Geteuid())
	}
	return nil
}

// ReadTrusted reads the file at path in dir, at most max bytes, when both
// are trusted (CheckDir; the file regular, not a link, owned by the
// effective user, mode 0600 or stricter); ok is false otherwise, or when
// it cannot be read.
func ReadTrusted(dir, path string, max int64) (data []byte, ok bool) {
	if CheckDir(dir, false) != nil {
		return nil, false
	}
	// A plain descriptor and one read of the file's size: no poller
	// registration, no growing buffer (this runs on every create).
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || !trustedOwner(&st) {
		return nil, false
	}
	data, err = hostfile.ReadFD(fd, path, max)
	return data, err == nil
}
