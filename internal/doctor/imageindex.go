package doctor

import (
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// Bounds of an image index (hostile images: too many files, link loops,
// absurd paths).
const (
	// maxImageEntries bounds the tar entries read from all layers (a
	// large CUDA image has a few hundred thousand).
	maxImageEntries = 2 << 20
	// maxImagePath bounds a path's length.
	maxImagePath = 4096
	// maxSymlinkHops bounds the links followed resolving one path (the
	// kernel's limit).
	maxSymlinkHops = 40
)

type entryKind uint8

const (
	kindDir entryKind = iota
	kindRegular
	kindSymlink
	kindOther
)

// imageEntry is one file of the merged layers.
type imageEntry struct {
	kind   entryKind
	target string // a link's target, as written
	size   int64
	layer  int // the layer that wrote it
	// src is where pass two finds the content: the layer and the tar
	// entry's position in it (a hard link's is its target's).
	src imageSrc
	// data is the content, for the files the checks read (kept is true).
	data io.ReaderAt
	kept bool
}

// imageSrc locates a tar entry: its layer and its position in it.
type imageSrc struct{ layer, ordinal int }

// imageIndex is the merged file tree of an image's layers: every path's
// kind, link target and size, and the content of the few files the checks
// read. It implements containerFiles.
type imageIndex struct {
	entries  map[string]*imageEntry
	children map[string]map[string]bool
	count    int
	// skipped counts tar entries refused (".." paths, over-long names).
	skipped int
}

func newImageIndex() *imageIndex {
	x := &imageIndex{entries: map[string]*imageEntry{}, children: map[string]map[string]bool{}}
	x.entries["/"] = &imageEntry{kind: kindDir, layer: -1}
	return x
}

// cleanTarName turns a layer's tar entry name into an image path; ok is
// false for names the index refuses (".." components, too long, empty).
func cleanTarName(name string) (string, bool) {
	if len(name) > maxImagePath || strings.ContainsRune(name, 0) {
		return "", false
	}
	if slices.Contains(strings.Split(name, "/"), "..") {
		return "", false
	}
	p := path.Clean("/" + name)
	return p, p != "/"
}

// remove deletes p and everything below it.
func (x *imageIndex) remove(p string) {
	if _, ok := x.entries[p]; !ok || p == "/" {
		return
	}
	for c := range x.children[p] {
		x.remove(path.Join(p, c))
	}
	delete(x.children, p)
	delete(x.entries, p)
	if s := x.children[path.Dir(p)]; s != nil {
		delete(s, path.Base(p))
	}
}

// removeLower deletes what layers below layer wrote below the directory p
// (an opaque whiteout), keeping what layer itself wrote.
func (x *imageIndex) removeLower(p string, layer int) {
	for c := range x.children[p] {
		cp := path.Join(p, c)
		e := x.entries[cp]
		if e == nil || e.layer >= layer {
			if e != nil && e.kind == kindDir {
				x.removeLower(cp, layer)
			}
			continue
		}
		if e.kind == kindDir {
			x.removeLower(cp, layer)
			if len(x.children[cp]) > 0 {
				e.layer = layer
				continue
			}
		}
		x.remove(cp)
	}
}

// put records e at p, creating missing parent directories; a non-directory
// replaces whatever was at p, a directory keeps the directory's contents.
func (x *imageIndex) put(p string, e *imageEntry) {
	parent := path.Dir(p)
	if pe, ok := x.entries[parent]; !ok || pe.kind != kindDir {
		if ok {
			x.remove(parent)
		}
		x.put(parent, &imageEntry{kind: kindDir, layer: e.layer, src: imageSrc{-1, -1}})
	}
	if old, ok := x.entries[p]; ok && (old.kind != kindDir || e.kind != kindDir) {
		x.remove(p)
	}
	x.entries[p] = e
	s := x.children[parent]
	if s == nil {
		s = map[string]bool{}
		x.children[parent] = s
	}
	s[path.Base(p)] = true
}

// whiteout applies the whiteout file p (".wh.NAME" or ".wh..wh..opq")
// written by layer; it reports whether p was one.
func (x *imageIndex) whiteout(p string, layer int) bool {
	base := path.Base(p)
	name, ok := strings.CutPrefix(base, ".wh.")
	if !ok {
		return false
	}
	dir := path.Dir(p)
	if name == ".wh..opq" {
		x.removeLower(dir, layer)
		return true
	}
	if name != "" {
		x.remove(path.Join(dir, name))
	}
	return true
}

// lookup resolves p, following links inside the tree (at most
// maxSymlinkHops; ".." stops at "/"), and returns the final path and its
// entry.
func (x *imageIndex) lookup(p string) (string, *imageEntry, bool) {
	parts := splitPath(p)
	cur, hops := "/", 0
	for i := 0; i < len(parts); i++ {
		next := path.Join(cur, parts[i])
		e, ok := x.entries[next]
		if !ok {
			return "", nil, false
		}
		if e.kind == kindSymlink {
			if hops++; hops > maxSymlinkHops || len(e.target) > maxImagePath {
				return "", nil, false
			}
			if path.IsAbs(e.target) {
				cur = "/"
			}
			parts = append(splitPath(e.target), parts[i+1:]...)
			i = -1
			continue
		}
		if i < len(parts)-1 && e.kind != kindDir {
			return "", nil, false
		}
		cur = next
	}
	return cur, x.entries[cur], true
}

// splitPath splits a path into its components ("." dropped).
func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

func (x *imageIndex) stat(p string) (string, bool, bool) {
	real, e, ok := x.lookup(p)
	if !ok {
		return "", false, false
	}
	return real, e.kind == kindRegular, true
}

func (x *imageIndex) list(p string) []dirEntry {
	real, e, ok := x.lookup(p)
	if !ok || e.kind != kindDir {
		return nil
	}
	names := make([]string, 0, len(x.children[real]))
	for c := range x.children[real] {
		names = append(names, c)
	}
	slices.Sort(names)
	out := make([]dirEntry, 0, len(names))
	for _, c := range names {
		ce := x.entries[path.Join(real, c)]
		out = append(out, dirEntry{name: c, regular: ce.kind == kindRegular, size: ce.size})
	}
	return out
}

// keptFile is the kept content of an image file.
type keptFile struct {
	io.ReaderAt
	size int64
}

func (k keptFile) Size() int64  { return k.size }
func (k keptFile) Close() error { return nil }

func (x *imageIndex) open(p string) (fileData, error) {
	real, e, ok := x.lookup(p)
	switch {
	case !ok:
		return nil, fmt.Errorf("%s: no such file in the image", p)
	case e.kind != kindRegular:
		return nil, fmt.Errorf("%s: not a regular file", real)
	case !e.kept:
		return nil, fmt.Errorf("%s: %w", real, errNotKept)
	}
	return keptFile{e.data, e.size}, nil
}
