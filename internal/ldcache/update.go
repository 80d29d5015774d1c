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

// EntriesFor returns the cache entries ldconfig (glibc 2.33–2.42) records
// for these directory entries, directory by directory in order of first
// appearance:
//
//   - a file, or a symlink that is not named after the SONAME of what it
//     points to, counts as an implementation of that SONAME (the file name
//     when the library has none);
//   - a symlink named after that SONAME, or a development link "libX.so"
//     whose target's SONAME starts with its name (libcuda.so ->
//     libcuda.so.1), is a name of its own;
//   - each distinct name in a directory gets one entry, key NAME and value
//     DIR/NAME, with the library's flags.
//
// So libcuda.so.535.x, its SONAME link libcuda.so.1 and the dev link
// libcuda.so give the entries libcuda.so.1 and libcuda.so, while a link
// such as libGLX_indirect.so.0 -> libGLX_nvidia.so.535.x gives none of its
// own. Names ldconfig ignores (IsLibraryName) are skipped.
func EntriesFor(names []DirEntry) []Entry {
	type group struct {
		dir, key, name string
		isLink         bool
		flags          int32
	}
	var dirs []string
	byDir := map[string][]*group{}
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
		i := slices.IndexFunc(gs, func(g *group) bool { return g.key == soname })
		if i < 0 {
			byDir[dir] = append(gs, &group{dir: dir, key: soname, name: n.Name, isLink: isLink, flags: n.Lib.Flags})
			continue
		}
		g := gs[i]
		// ldconfig keeps the file over a link, else the "newer" name; the
		// flags follow it between plain ELF and libc5/libc6.
		if (!isLink && g.isLink) || (isLink == g.isLink && LibCmp(g.name, n.Name) < 0) {
			if f := n.Lib.Flags; g.flags != f {
				if (g.flags == FlagELF && (f == FlagELFLibc5 || f == FlagELFLibc6)) ||
					((g.flags == FlagELFLibc5 || g.flags == FlagELFLibc6) && f == FlagELF) {
					g.flags = f
				}
			}
			g.name, g.isLink = n.Name, isLink
		}
	}
	var out []Entry
	for _, d := range dirs {
		gs := byDir[d]
		// ldconfig adds a directory's libraries last-seen first.
		for i := len(gs) - 1; i >= 0; i-- {
			g := gs[i]
			out = append(out, Entry{Key: g.key, Value: d + "/" + g.key, Flags: g.flags})
		}
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
