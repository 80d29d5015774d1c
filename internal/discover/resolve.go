package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// maxSymlinks bounds symlink expansion during one resolution, like the
// kernel's MAXSYMLINKS (40).
const maxSymlinks = 40

// inRoot resolves paths inside a root directory: every symlink, absolute or
// relative, is interpreted as if root were "/", and ".." never climbs above
// root. It memoises lstat and readlink results, so resolving many files in
// the same directories costs one system call per distinct component.
type inRoot struct {
	root  string // host path of the root, cleaned; "/" for the host
	lstat map[string]lstatResult
}

type lstatResult struct {
	mode   fs.FileMode
	target string // symlink target when mode is a symlink
	err    error
}

func newInRoot(root string) *inRoot {
	return &inRoot{root: path.Clean(root), lstat: map[string]lstatResult{}}
}

// host returns the host path of an in-root path.
func (r *inRoot) host(p string) string {
	if r.root == "/" {
		return p
	}
	if p == "/" {
		return r.root
	}
	return r.root + p
}

func (r *inRoot) stat(p string) lstatResult {
	if res, ok := r.lstat[p]; ok {
		return res
	}
	var res lstatResult
	fi, err := os.Lstat(r.host(p))
	if err != nil {
		res.err = err
	} else {
		res.mode = fi.Mode()
		if res.mode&fs.ModeSymlink != 0 {
			res.target, res.err = os.Readlink(r.host(p))
		}
	}
	r.lstat[p] = res
	return res
}

// resolve returns the in-root path p refers to, with every symlink
// resolved inside the root. p is interpreted relative to the root's "/". It
// fails if a component does not exist (the error wraps fs.ErrNotExist), is
// not a directory where one is needed, or if symlinks loop.
func (r *inRoot) resolve(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	resolved := "/"
	rest := p
	links := 0
	for rest != "" {
		var comp string
		rest = strings.TrimLeft(rest, "/")
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			comp, rest = rest[:i], rest[i:]
		} else {
			comp, rest = rest, ""
		}
		switch comp {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, comp)
		st := r.stat(next)
		if st.err != nil {
			return "", fmt.Errorf("resolve %s inside %s: %w", p, r.root, st.err)
		}
		if st.mode&fs.ModeSymlink == 0 {
			if rest != "" && strings.Trim(rest, "/") != "" && !st.mode.IsDir() {
				return "", fmt.Errorf("resolve %s inside %s: %s: %w", p, r.root, next, syscall.ENOTDIR)
			}
			resolved = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("resolve %s inside %s: %w", p, r.root, syscall.ELOOP)
		}
		if strings.HasPrefix(st.target, "/") {
			resolved = "/"
		}
		rest = st.target + "/" + rest
		if strings.HasSuffix(rest, "/") {
			rest = strings.TrimRight(rest, "/")
		}
	}
	return resolved, nil
}

// statFollow resolves p inside the root and stats the result.
func (r *inRoot) statFollow(p string) (string, fs.FileInfo, error) {
	real, err := r.resolve(p)
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(r.host(real))
	if err != nil {
		return "", nil, err
	}
	return real, fi, nil
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
