package rootfs

import (
	"io/fs"
	"os"
)

// Path-taking wrappers over the root's unexported operations, for this
// package's tests and benchmarks; production code goes through Attach,
// MountTmpfs and the other exported operations.

// CreatePlaceholder is placeholder on an uncleaned path, with a Kind, and
// returns the descriptor as a file the caller owns.
func (r *Root) CreatePlaceholder(p string, kind Kind, mode fs.FileMode) (*os.File, error) {
	cp, err := clean(p)
	if err != nil {
		return nil, r.errorf(p, err)
	}
	fd, err := r.placeholder(cp, kind == KindDir, uint32(mode.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), cp), nil
}

// BindMount opens hostPath (OpenSource rules) and attaches it over dst
// inside the root.
func (r *Root) BindMount(hostPath, dst string, kind Kind, opts []string) error {
	s, err := OpenSource(hostPath, kind, opts)
	if err != nil {
		return r.errorf(dst, err)
	}
	defer s.Close()
	return r.Attach(s, dst)
}
