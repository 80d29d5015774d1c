package hostfacts

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
)

// Lib is what ld.so.cache records about a library file (its SONAME and
// flags, ldcache.Inspect), with the identity of the file it was read
// from: device, inode, size, mtime and ctime. Writing, replacing or
// renaming the file changes them (ctime cannot be set back), so a file
// found with the same identity holds the same ELF headers.
type Lib struct {
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

// SetIdentity fills the identity fields of l from st.
func (l *Lib) SetIdentity(st *unix.Stat_t) {
	l.Dev, l.Ino, l.Size = st.Dev, st.Ino, st.Size
	l.Mtime, l.Ctime = st.Mtim.Nano(), st.Ctim.Nano()
}

// SameFile reports whether st is the regular file l was read from.
func (l *Lib) SameFile(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && l.id() == idOf(st)
}

// fileID is a file's identity as Lib keeps it.
type fileID struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

func (l *Lib) id() fileID { return fileID{l.Dev, l.Ino, l.Size, l.Mtime, l.Ctime} }

func idOf(st *unix.Stat_t) fileID {
	return fileID{st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()}
}

// String is the identity as the ldconfig directories cache writes it:
// dev:ino:size:mtime:ctime.
func (id fileID) String() string {
	return fmt.Sprintf("%d:%d:%d:%d:%d", id.dev, id.ino, id.size, id.mtime, id.ctime)
}

// InspectLib reads the library at the host path p as the runtime does
// (hostfile's checks, ldcache.Inspect), with its identity; ok is false
// when it cannot be opened or read.
func InspectLib(p string) (Lib, bool) {
	fd, err := hostfile.OpenFD(p, hostfile.MaxLibrary)
	if err != nil {
		return Lib{}, false
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Lib{}, false
	}
	lib, err := ldcache.Inspect(f, st.Size)
	if err != nil && !errors.Is(err, ldcache.ErrNotLibrary) {
		return Lib{}, false
	}
	l := Lib{SONAME: lib.SONAME, Flags: lib.Flags, NotLib: err != nil}
	l.SetIdentity(&st)
	return l, true
}
