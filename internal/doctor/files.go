package doctor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nctk/nctk/internal/hostfile"
)

// containerFiles is the container's file tree as the container checks see
// it, whatever holds it: a bundle's rootfs directory (rootfsFiles) or the
// index of an image's layers (imageIndex). Paths are absolute, clean paths
// inside the container; symbolic links are followed inside the tree, never
// out of it.
type containerFiles interface {
	// stat follows the symbolic links of p inside the tree and returns
	// the image path of the final entry and whether it is a regular file;
	// ok is false when p does not exist.
	stat(p string) (real string, regular, ok bool)
	// list returns the entries directly in the directory p (its links
	// followed), each with whether it is itself a regular file (its own
	// link not followed).
	list(p string) []dirEntry
	// open opens the regular file at p (links followed) for reading.
	open(p string) (fileData, error)
}

// dirEntry is one entry of a directory of the container's tree.
type dirEntry struct {
	name    string
	regular bool
	size    int64 // a regular file's size
}

// fileData is an open regular file of the container's tree.
type fileData interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// errNotKept: the image index holds the file's name but not its content
// (only the files the checks read are kept).
var errNotKept = errors.New("content not kept")

// rootfsFiles is a bundle's rootfs directory.
type rootfsFiles struct{ root string }

func (r rootfsFiles) host(p string) (string, bool) {
	h, err := securejoin.SecureJoin(r.root, p)
	return h, err == nil
}

func (r rootfsFiles) stat(p string) (string, bool, bool) {
	h, ok := r.host(p)
	if !ok {
		return "", false, false
	}
	fi, err := os.Stat(h)
	if err != nil {
		return "", false, false
	}
	rel, err := filepath.Rel(r.root, h)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false, false
	}
	return path.Clean("/" + filepath.ToSlash(rel)), fi.Mode().IsRegular(), true
}

func (r rootfsFiles) list(p string) []dirEntry {
	h, ok := r.host(p)
	if !ok {
		return nil
	}
	entries, err := os.ReadDir(h)
	if err != nil {
		return nil
	}
	out := make([]dirEntry, 0, len(entries))
	for _, e := range entries {
		d := dirEntry{name: e.Name(), regular: e.Type().IsRegular()}
		if d.regular {
			if fi, err := e.Info(); err == nil {
				d.size = fi.Size()
			}
		}
		out = append(out, d)
	}
	return out
}

// osFile is an *os.File with its size.
type osFile struct {
	*os.File
	size int64
}

func (f osFile) Size() int64 { return f.size }

func (r rootfsFiles) open(p string) (fileData, error) {
	h, ok := r.host(p)
	if !ok {
		return nil, fmt.Errorf("%s: outside the rootfs", p)
	}
	f, err := hostfile.Open(h, hostfile.MaxLibrary)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", h, err)
	}
	return osFile{f, fi.Size()}, nil
}

// readAll reads the regular file p of the tree, at most limit bytes.
func readAll(fsys containerFiles, p string, limit int64) ([]byte, error) {
	f, err := fsys.open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, limit %d", p, hostfile.ErrTooLarge, f.Size(), limit)
	}
	return hostfile.ReadAll(io.NewSectionReader(f, 0, f.Size()), p, limit)
}

// glob returns the paths of the tree matching pattern (path.Match syntax,
// one pattern per component), sorted; with regularOnly, only entries that
// are themselves regular files (not links) are returned. Directories on
// the way are entered through their links.
func glob(fsys containerFiles, pattern string, regularOnly bool) []string {
	parts := strings.Split(strings.Trim(path.Clean(pattern), "/"), "/")
	cur := []string{"/"}
	for i, part := range parts {
		last := i == len(parts)-1
		var next []string
		for _, dir := range cur {
			for _, e := range fsys.list(dir) {
				if ok, _ := path.Match(part, e.name); ok && (!last || !regularOnly || e.regular) {
					next = append(next, path.Join(dir, e.name))
				}
			}
		}
		cur = next
		if len(cur) == 0 {
			return nil
		}
	}
	slices.Sort(cur)
	return cur
}
