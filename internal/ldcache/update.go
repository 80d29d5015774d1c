package ldcache

import (
	"path"
	"slices"
	"strings"
)

// DirEntry is one name in a library directory as ldconfig considers it: a
// library file or a symlink to one, with what the ELF file it resolves to
// says (see Inspect).
type DirEntry struct {
	// Dir is the directory (as ldconfig is given it) and Name the file name
	// in it.
	Dir, Name string
	// IsLink is set when Name is a symbolic link.
	IsLink bool
	// Lib describes the file Name resolves to.
	Lib Library
}

// IsLibraryName reports whether ldconfig looks at a file of this name: one
// that starts with "lib" or "ld-" and contains ".so".
func IsLibraryName(name string) bool {
	return (strings.HasPrefix(name, "lib") || strings.HasPrefix(name, "ld-")) && strings.Contains(name, ".so")
}

// DirLib is one name ldconfig records for a library directory: Key (a
// SONAME, or the name of a link that names itself, see EntriesFor) and
// the directory entry Name it chose for it.
type DirLib struct {
	// Dir is the directory (cleaned) and Key the name the cache maps to
	// Dir/Key.
	Dir, Key string
	// Name is the directory entry chosen for Key: a file, or a link;
	// IsLink is set when that link counts as a name of its own (named after
	// the SONAME, or a development link), for which ldconfig creates no
	// SONAME link.
	Name   string
	IsLink bool
	// Flags are the library's cache flags.
	Flags int32
}

// Entry is the cache entry ldconfig records for l: key Key, value
// Dir/Key, with the library's flags.
func (l DirLib) Entry() Entry { return Entry{Key: l.Key, Value: l.Dir + "/" + l.Key, Flags: l.Flags} }

// SONAMELink reports whether ldconfig (without -X) makes Dir/Key a symlink
// to Name: Name is not a link of its own and is not named Key.
func (l DirLib) SONAMELink() bool { return !l.IsLink && l.Name != l.Key }

// DirLibs returns what ldconfig (glibc 2.33–2.42) records for these
// directory entries, directory by directory in order of first appearance,
// and within a directory in the order ldconfig adds them to the cache:
//
//   - a file, or a symlink that is not named after the SONAME of what it
//     points to, counts as an implementation of that SONAME (the file name
//     when the library has none);
//   - a symlink named after that SONAME, or a development link "libX.so"
//     whose target's SONAME starts with its name (libcuda.so ->
//     libcuda.so.1), is a name of its own;
//   - each distinct name in a directory is recorded once, for the entry
//     ldconfig prefers (a file over a link, else the "newer" name by
//     LibCmp).
//
// So libcuda.so.535.x, its SONAME link libcuda.so.1 and the dev link
// libcuda.so give the names libcuda.so.1 (for the file) and libcuda.so,
// while a link such as libGLX_indirect.so.0 -> libGLX_nvidia.so.535.x
// counts as one more implementation of libGLX_nvidia.so.0. Names ldconfig
// ignores (IsLibraryName) are skipped.
func DirLibs(names []DirEntry) []DirLib {
	var dirs []string
	byDir := map[string][]*DirLib{}
	for _, n := range names {
		if !IsLibraryName(n.Name) {
			continue
		}
		dir := path.Clean(n.Dir)
		soname := n.Lib.SONAME
		if soname == "" {
			soname = n.Name
		}
		isLink := n.IsLink
		if isLink && n.Name != soname && !(strings.HasSuffix(n.Name, ".so") && strings.HasPrefix(soname, n.Name)) {
			isLink = false
		}
		if isLink {
			soname = n.Name
		}
		gs, seen := byDir[dir]
		if !seen {
			dirs = append(dirs, dir)
		}
		i := slices.IndexFunc(gs, func(g *DirLib) bool { return g.Key == soname })
		if i < 0 {
			byDir[dir] = append(gs, &DirLib{Dir: dir, Key: soname, Name: n.Name, IsLink: isLink, Flags: n.Lib.Flags})
			continue
		}
		g := gs[i]
		// ldconfig keeps the file over a link, else the "newer" name; the
		// flags follow it between plain ELF and libc5/libc6.
		if (!isLink && g.IsLink) || (isLink == g.IsLink && LibCmp(g.Name, n.Name) < 0) {
			if f := n.Lib.Flags; g.Flags != f {
				if (g.Flags == FlagELF && (f == FlagELFLibc5 || f == FlagELFLibc6)) ||
					((g.Flags == FlagELFLibc5 || g.Flags == FlagELFLibc6) && f == FlagELF) {
					g.Flags = f
				}
			}
			g.Name, g.IsLink = n.Name, isLink
		}
	}
	var out []DirLib
	for _, d := range dirs {
		gs := byDir[d]
		// ldconfig adds a directory's libraries last-seen first.
		for i := len(gs) - 1; i >= 0; i-- {
			out = append(out, *gs[i])
		}
	}
	return out
}

// EntriesFor returns the cache entries ldconfig records for these
// directory entries (DirLibs): key NAME and value DIR/NAME for each name,
// with the library's flags.
func EntriesFor(names []DirEntry) []Entry { return LibEntries(DirLibs(names)) }

// LibEntries returns the cache entry of each of libs (DirLib.Entry), in
// order.
func LibEntries(libs []DirLib) []Entry {
	out := make([]Entry, len(libs))
	for i, l := range libs {
		out[i] = l.Entry()
	}
	return out
}

// Update returns a new cache holding added and c's entries, in ldconfig's
// order (SortEntries), as ldconfig run over added's directories would write
// it: c's entries for a key in a directory that added has an entry for
// (same key, same directory of the value) are dropped; among entries that
// ldconfig considers equal, added ones come first, like the directories
// given to ldconfig on its command line. c may be nil (no cache). c's
// glibc-hwcaps names are kept. c is not modified.
func (c *Cache) Update(added []Entry) *Cache {
	type dk struct{ dir, key string }
	replaced := make(map[dk]bool, len(added))
	for _, e := range added {
		replaced[dk{path.Dir(e.Value), e.Key}] = true
	}
	var base []Entry
	var hwcaps []string
	if c != nil {
		base, hwcaps = c.Entries, slices.Clone(c.HWCaps)
	}
	out := make([]Entry, 0, len(added)+len(base))
	out = append(out, added...)
	for _, e := range base {
		if !replaced[dk{path.Dir(e.Value), e.Key}] {
			out = append(out, e)
		}
	}
	SortEntries(out, hwcaps)
	return &Cache{Entries: out, HWCaps: hwcaps}
}
