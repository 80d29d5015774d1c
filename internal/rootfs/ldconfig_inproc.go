package rootfs

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/ldcache"
	"golang.org/x/sys/unix"
)

// ErrRebuildUnsupported: the container root holds something the in-process
// ldconfig (Root.RebuildLdCache) does not reproduce exactly; the caller
// runs the host's ldconfig instead (RunLdconfig).
var ErrRebuildUnsupported = errors.New("not reproduced by the in-process ldconfig")

// maxConfDepth bounds nested ld.so.conf includes (glibc has no bound).
const maxConfDepth = 8

// maxConfSize bounds one ld.so.conf file read in the root.
const maxConfSize = 1 << 20

// Bounds on what one rebuild reads of an image (a hostile one could list
// endless directories or fill one with names): past them the rebuild
// gives up (ErrRebuildUnsupported) and the caller runs the host's ldconfig
// in its sandbox, under its CPU and time limits.
const (
	maxScanDirs    = 1024
	maxScanEntries = 1 << 17
	maxConfFiles   = 1024
)

// RebuildOptions are what RebuildLdCache needs besides the directories.
type RebuildOptions struct {
	// SystemDirs are the host ldconfig's own system directories
	// (ProbeSystemDirs).
	SystemDirs []string
	// Pending is what will exist in the root when the container starts
	// but does not yet (the runtime rebuilds before the low-level runtime
	// mounts the driver's files): its files and links count as there,
	// read from the host files and followed through the links, in their
	// directories (a directory that does not exist yet included).
	Pending Pending
	// Mounts are the container paths of other mounts (not Pending's): a
	// directory ldconfig searches or a file it reads at or below one, or
	// a directory with one right in it under a name ldconfig looks at, is
	// not what the container will see, and is refused
	// (ErrRebuildUnsupported). /proc, /sys and /dev are left out anyway.
	Mounts []string
	// NoConf leaves the image's configuration as it is (RunLdconfig
	// without ConfDropIn): no drop-in, no /etc/ld.so.conf, no musl path
	// file; nothing is written before the scan.
	NoConf bool
}

// RebuildLdCache does in-process, in the container root, what RunLdconfig
// with ConfDropIn (without it, with o.NoConf) does there with the host's
// ldconfig (whose own system directories are o.SystemDirs): the same
// configuration files (the
// drop-ins listing dirs and the image's system directories,
// /etc/ld.so.conf when the image has none, the musl loader's path), the
// same SONAME links and the same /etc/ld.so.cache entries, with no process
// and no namespaces:
//
//   - the directories are those ldconfig searches, in its order: dirs (its
//     command line), those of /etc/ld.so.conf and the files it includes,
//     then the system directories; a directory that does not exist is
//     skipped, and one that is the same directory as an earlier one
//     (through symlinks) is searched once, under its first name; /proc,
//     /sys and /dev count as empty, as in the sandbox. Every path is
//     resolved inside the root.
//   - in each, the names ldconfig looks at (ldcache.IsLibraryName) are
//     read as it reads them (ELF headers only; a symlink's target resolved
//     inside the root and opened only when it is a regular file) and
//     classified by ldcache.DirLibs;
//   - links there that lead nowhere and whose names hold ".so." are
//     removed, as ldconfig removes them;
//   - for each library ldconfig links, DIR/SONAME is made a symlink to it
//     unless it already leads to that file (a regular file there is left
//     alone, as ldconfig leaves it);
//   - the cache holds every name, sorted as ldconfig sorts, and replaces
//     /etc/ld.so.cache atomically (mode 0644).
//
// ldconfig's auxiliary cache (/var/cache/ldconfig/aux-cache, a speed-up of
// its later runs) is not written, and the cache names nctk as its
// generator. What this does not reproduce (an ld.so.conf "hwcap" line or a
// directory it cannot take literally, glibc-hwcaps or legacy hwcap
// subdirectories, includes with patterns in directory names or nested too
// deep, a library needing more than the x86-64 baseline ISA, what
// o.Mounts cover, more than maxScanDirs directories or
// maxScanEntries names, and whatever the scan cannot read as ldconfig
// reads it) gives an error wrapping ErrRebuildUnsupported before any
// library link or the cache is written. Every change is
// journaled. log may be nil.
func (r *Root) RebuildLdCache(dirs []string, o RebuildOptions, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkLibDirs(dirs); err != nil {
		return fmt.Errorf("rebuild ld.so.cache: %w", err)
	}
	if !o.NoConf {
		if err := r.writeLdconfigConf(dirs, log); err != nil {
			return err
		}
	}
	sc := r.newLibScan()
	defer sc.close()
	libs, dangling, err := r.scanLdconfig(&sc, dirs, o)
	if err != nil {
		if !errors.Is(err, ErrRebuildUnsupported) {
			// What the image holds cannot be read as ldconfig reads it
			// (an unreadable file, an ELF file that does not parse):
			// ldconfig, which skips such files with a warning, decides.
			err = fmt.Errorf("%w: %w", err, ErrRebuildUnsupported)
		}
		return err
	}
	data, err := ldconfigCache(libs)
	if err != nil {
		return r.errorf(ldSoCache, err)
	}
	for _, cp := range dangling {
		// ldconfig removes the dangling links it meets whose names hold
		// ".so." (stale SONAME links); they lie in scanned directories.
		if dir, name := path.Split(cp); strings.Contains(name, ".so.") {
			dfd, ok := sc.dirs[path.Clean(dir)]
			if !ok {
				return r.errorf(cp, errors.New("dangling link outside the scanned directories"))
			}
			if err := r.removeSymlink(dfd, cp); err != nil {
				return err
			}
		}
	}
	links := 0
	for _, l := range libs {
		if !l.SONAMELink() {
			continue
		}
		dfd, open := sc.dirs[l.Dir]
		if !open {
			dfd = -1
		}
		made, err := r.sonameLink(l, dfd)
		if err != nil {
			return err
		}
		if made {
			links++
		}
	}
	if err := r.WriteFile(ldSoCache, data, 0o644); err != nil {
		return err
	}
	log.Debug("ld.so.cache rebuilt in-process", "libraries", len(libs), "links", links, "bytes", len(data))
	return nil
}

// ldconfigCache encodes the cache ldconfig writes for libs (in the order
// DirLibs and scanLdconfig give them).
func ldconfigCache(libs []ldcache.DirLib) ([]byte, error) {
	entries := ldcache.LibEntries(libs)
	ldcache.SortEntries(entries, nil)
	return ldcache.Encode(&ldcache.Cache{Entries: entries})
}

// writeLdconfigConf writes the configuration files ldconfig reads, for
// RebuildLdCache and for RunLdconfig's ConfDropIn: /etc/ld.so.conf when
// the image has none, the
// drop-in listing dirs, the drop-in listing the image's system
// directories, and the musl loader's path.
func (r *Root) writeLdconfigConf(dirs []string, log *slog.Logger) error {
	if len(dirs) > 0 {
		if err := r.writeConfDropIn(dirs); err != nil {
			return err
		}
	} else if err := r.writeConfInclude(); err != nil {
		return err
	}
	content := systemDirsDropIn(imageSystemDirs(r.Exists("/etc/debian_version"), runtime.GOARCH))
	if err := r.writeConf(ldSoConfSystemDropIn, content); err != nil {
		return err
	}
	if len(dirs) == 0 {
		return nil
	}
	return r.updateMuslPath(dirs, log)
}

// scanDir is a directory ldconfig searches: its path as ldconfig names it
// (its descriptor is sc.dirs[path]; none for one that only pending mounts
// will make) and the pending files and links that will be in it, by name.
type scanDir struct {
	path    string
	pending map[string]string // name -> the pending entry's container path
}

// openScanDir opens the directory d inside the root for reading, once per
// scan (sc.dirs keeps it), and returns its identity; unix.ENOENT when
// there is none.
func (r *Root) openScanDir(sc *libScan, d string) (int, fileID, error) {
	if fd, ok := sc.dirs[d]; ok {
		return fd, sc.dirIDs[d], nil
	}
	fd, err := r.resolve(d, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return -1, fileID{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fileID{}, r.errorf(d, err)
	}
	id := fileID{st.Dev, st.Ino}
	if sc.dirIDs == nil {
		sc.dirIDs = map[string]fileID{}
	}
	sc.dirs[d], sc.dirIDs[d] = fd, id
	return fd, id, nil
}

// pendingByDir groups what p will create by the directory it will be in:
// by identity for a directory the root has, by path for one it does not
// have yet.
type pendingByDir struct {
	byID   map[fileID]map[string]string
	byPath map[string]map[string]string
}

func (r *Root) groupPending(sc *libScan, p Pending) (pendingByDir, error) {
	g := pendingByDir{byID: map[fileID]map[string]string{}, byPath: map[string]map[string]string{}}
	put := func(m map[string]string, name, cp string) map[string]string {
		if m == nil {
			m = map[string]string{}
		}
		m[name] = cp
		return m
	}
	paths := make([]string, 0, len(p.Files)+len(p.Links))
	for _, f := range p.Files {
		paths = append(paths, f.Path)
	}
	for _, l := range p.Links {
		paths = append(paths, l.Path)
	}
	for _, cp := range paths {
		cp = path.Clean("/" + cp)
		dir, name := path.Split(cp)
		dir = path.Clean(dir)
		if !ldcache.IsLibraryName(name) {
			continue
		}
		_, id, err := r.openScanDir(sc, dir)
		switch {
		case err == unix.ENOENT:
			g.byPath[dir] = put(g.byPath[dir], name, cp)
		case err != nil:
			return g, r.errorf(dir, err)
		default:
			g.byID[id] = put(g.byID[id], name, cp)
		}
	}
	return g, nil
}

// scanLdconfig returns what ldconfig finds in the directories it searches
// (see RebuildLdCache), and the links there that lead nowhere, without
// changing anything; sc keeps the directories open.
func (r *Root) scanLdconfig(sc *libScan, dirs []string, o RebuildOptions) ([]ldcache.DirLib, []string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(r.fd, &st); err != nil {
		return nil, nil, r.errorf("/", err)
	}
	// Only files from outside the root's own file system (the mounted
	// driver libraries, volumes) are worth remembering across containers.
	rootDev := st.Dev
	sc.learn = func(st *unix.Stat_t) bool { return st.Dev != rootDev }
	sc.statLinks = true
	if len(o.Pending.Files)+len(o.Pending.Links) > 0 {
		sc.pendingFiles = map[string]PendingFile{}
		for _, f := range o.Pending.Files {
			sc.pendingFiles[path.Clean(f.Path)] = f
		}
		sc.pendingLinks = map[string]string{}
		for _, l := range o.Pending.Links {
			sc.pendingLinks[path.Clean(l.Path)] = l.Target
		}
	}
	pending, err := r.groupPending(sc, o.Pending)
	if err != nil {
		return nil, nil, err
	}
	var mounts []string
	for _, m := range o.Mounts {
		if m = path.Clean("/" + m); !maskedPath(m) {
			mounts = append(mounts, m)
		}
	}
	list, err := r.ldconfigDirs(sc, dirs, o.SystemDirs, pending, mounts)
	if err != nil {
		return nil, nil, err
	}
	var names []ldcache.DirEntry
	for _, d := range list {
		if names, err = r.scanLibDir(sc, d, names); err != nil {
			return nil, nil, err
		}
	}
	return ldcache.DirLibs(names), sc.dangling, nil
}

// covered reports whether a mount point in mounts changes what ldconfig
// would find at p, a directory it searches or a file it reads: one at p or
// above it, or one right in p whose name ldconfig looks at (a library, a
// hardware-capability subdirectory; with conf, any name: an included
// configuration file). Mounts deeper below p do not matter.
func covered(p string, mounts []string, conf bool) (string, bool) {
	for _, m := range mounts {
		if m == p || m == "/" || strings.HasPrefix(p, m+"/") {
			return m, true
		}
		if dir, name := path.Split(m); path.Clean(dir) == p && (conf || ldcache.IsLibraryName(name) || hwcapSubdir(name)) {
			return m, true
		}
	}
	return "", false
}

// ldconfigDirs opens the directories ldconfig searches, in its order, each
// once (sc keeps the descriptors), with the pending entries each will hold.
func (r *Root) ldconfigDirs(sc *libScan, dirs, systemDirs []string, pending pendingByDir, mounts []string) ([]scanDir, error) {
	var list []scanDir
	seen := map[fileID]bool{}
	seenPath := map[string]bool{}
	add := func(d string) error {
		if seenPath[d] || maskedPath(d) {
			return nil
		}
		if m, ok := covered(d, mounts, false); ok {
			return fmt.Errorf("library directory %s: the mount at %s covers it: %w", d, m, ErrRebuildUnsupported)
		}
		fd, id, err := r.openScanDir(sc, d)
		switch err {
		case nil:
		case unix.ENOENT:
			if names := pending.byPath[d]; names != nil {
				// Only the pending mounts will make it.
				seenPath[d] = true
				list = append(list, scanDir{path: d, pending: names})
			}
			return nil // ldconfig: "Can't stat"
		case unix.ENOTDIR, unix.ELOOP:
			return nil // ldconfig: "Can't stat", or "Can't open directory"
		default:
			return r.errorf(d, err)
		}
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil || fs.Type == unix.PROC_SUPER_MAGIC || fs.Type == unix.SYSFS_MAGIC {
			return nil // the sandbox masks procfs and sysfs
		}
		if seen[id] {
			return nil
		}
		if len(list) >= maxScanDirs {
			return fmt.Errorf("more than %d library directories: %w", maxScanDirs, ErrRebuildUnsupported)
		}
		seen[id], seenPath[d] = true, true
		list = append(list, scanDir{path: d, pending: pending.byID[id]})
		return nil
	}
	for _, d := range dirs {
		if c := strings.TrimRight(d, "/"); c != path.Clean(d) || c == "" {
			return nil, fmt.Errorf("library directory %q: %w", d, ErrRebuildUnsupported)
		}
		if err := add(strings.TrimRight(d, "/")); err != nil {
			return nil, err
		}
	}
	conf := confReader{r: r, add: add, mounts: mounts}
	if err := conf.read(ldSoConf, 0); err != nil {
		return nil, err
	}
	for _, d := range systemDirs {
		if err := add(d); err != nil {
			return nil, err
		}
	}
	return list, nil
}

// maskedPath reports whether p lies in /proc, /sys or /dev, which the
// ldconfig sandbox covers with empty directories (maskSystemDirs).
func maskedPath(p string) bool {
	for _, m := range []string{"/proc", "/sys", "/dev"} {
		if p == m || strings.HasPrefix(p, m+"/") {
			return true
		}
	}
	return false
}

// confReader reads ld.so.conf files in the root, as ldconfig does,
// calling add for each directory they name; mounts are the other mounts
// (RebuildOptions.Mounts).
type confReader struct {
	r      *Root
	add    func(string) error
	mounts []string
	files  int // read so far
}

// read reads file (a missing or unreadable one names nothing, as for
// ldconfig), at include depth depth.
func (c *confReader) read(file string, depth int) error {
	r := c.r
	if maskedPath(file) {
		return nil
	}
	if m, ok := covered(file, c.mounts, false); ok {
		return fmt.Errorf("%s: the mount at %s covers it: %w", file, m, ErrRebuildUnsupported)
	}
	if depth > maxConfDepth {
		return fmt.Errorf("%s: includes nested more than %d deep: %w", file, maxConfDepth, ErrRebuildUnsupported)
	}
	if c.files++; c.files > maxConfFiles {
		return fmt.Errorf("%s: more than %d configuration files: %w", file, maxConfFiles, ErrRebuildUnsupported)
	}
	st, err := r.Stat(file)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	data, err := r.ReadFile(file, maxConfSize)
	if err != nil {
		return err
	}
	lines, err := ldcache.ParseConf(data)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", file, err, ErrRebuildUnsupported)
	}
	for _, l := range lines {
		if l.Dir != "" {
			if err := c.add(l.Dir); err != nil {
				return err
			}
			continue
		}
		for _, pat := range l.Include {
			if !path.IsAbs(pat) {
				pat = path.Dir(file) + "/" + pat
			}
			if m, ok := covered(path.Dir(pat), c.mounts, true); ok {
				return fmt.Errorf("%s line %d: the mount at %s covers %s: %w", file, l.Line, m, path.Dir(pat), ErrRebuildUnsupported)
			}
			files, err := r.glob(pat)
			if err != nil {
				return fmt.Errorf("%s line %d: %w", file, l.Line, err)
			}
			for _, f := range files {
				if err := c.read(f, depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// glob returns the paths in the root that the include pattern pat matches,
// sorted, as glob(3) in the C locale gives them: wildcards in the last
// component only, names starting with "." only for a pattern that does.
func (r *Root) glob(pat string) ([]string, error) {
	dir, base := path.Split(pat)
	const meta = `*?[\`
	if base == "" || strings.ContainsAny(dir, meta) || strings.Contains(pat, "..") || strings.Contains(pat, "//") || strings.Contains(pat, "/./") {
		return nil, fmt.Errorf("include pattern %q: %w", pat, ErrRebuildUnsupported)
	}
	if !strings.ContainsAny(base, meta) {
		return []string{pat}, nil
	}
	if _, err := path.Match(base, ""); err != nil {
		return nil, fmt.Errorf("include pattern %q: %w", pat, ErrRebuildUnsupported)
	}
	names, err := r.ReadDir(dir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil, nil
		}
		return nil, err
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, ".") && !strings.HasPrefix(base, ".") {
			continue
		}
		if ok, _ := path.Match(base, n); ok {
			out = append(out, dir+n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// hwcapSubdir reports whether ldconfig (some glibc version) searches a
// library directory's subdirectory of this name: glibc-hwcaps, and the
// legacy hardware-capability and platform names glibc before 2.37 knew.
func hwcapSubdir(name string) bool {
	switch name {
	case "glibc-hwcaps", "tls",
		"i386", "i486", "i586", "i686", "x86_64", "sse2", "avx512_1", "haswell", "xeon_phi",
		"asimd", "aarch64", "v5l", "v6l", "v7l", "v8l", "vfp", "neon", "vfpv3",
		"power4", "power5", "power5+", "power6", "power6x", "power7", "power8", "power9", "power10",
		"ppc970", "cell", "ppca2", "ppce500mc", "ppc-cell-be", "altivec",
		"z900", "z990", "z9-109", "z10", "z196", "zEC12", "z13", "z14", "z15", "z16":
		return true
	}
	return false
}

// scanLibDir appends to names the library entries of the directory d, as
// ldconfig reads them, its pending entries counted in.
func (r *Root) scanLibDir(sc *libScan, d scanDir, names []ldcache.DirEntry) ([]ldcache.DirEntry, error) {
	var ents []os.DirEntry
	if dfd, ok := sc.dirs[d.path]; ok {
		fd, err := dupCloexec(dfd)
		if err != nil {
			return nil, r.errorf(d.path, err)
		}
		f := os.NewFile(uintptr(fd), d.path)
		ents, err = f.ReadDir(-1)
		f.Close()
		if err != nil {
			return nil, r.errorf(d.path, err)
		}
	}
	if sc.entries += len(ents); sc.entries > maxScanEntries {
		return nil, fmt.Errorf("more than %d names in the library directories: %w", maxScanEntries, ErrRebuildUnsupported)
	}
	for _, e := range ents {
		name := e.Name()
		if hwcapSubdir(name) && !e.Type().IsRegular() {
			return nil, fmt.Errorf("%s/%s: a hardware-capability subdirectory: %w", d.path, name, ErrRebuildUnsupported)
		}
		if _, ok := d.pending[name]; ok || !ldcache.IsLibraryName(name) || strings.HasSuffix(name, ".#prelink#") ||
			strings.Contains(name, ".#prelink#.") || e.IsDir() {
			continue
		}
		de, ok, err := r.libraryEntry(sc, d.path+"/"+name, d.path, name)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := rebuildable(d.path+"/"+name, de.Lib); err != nil {
				return nil, err
			}
			names = append(names, de)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.pending)) {
		cp := d.pending[name]
		_, isLink := sc.pendingLinks[cp]
		lib, ok, err := r.pendingLibrary(sc, cp, sc.pendingFiles, sc.pendingLinks)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := rebuildable(cp, lib); err != nil {
				return nil, err
			}
			names = append(names, ldcache.DirEntry{Dir: d.path, Name: name, IsLink: isLink, Lib: lib})
		}
	}
	return names, nil
}

// rebuildable refuses a library the rebuild does not take as ldconfig
// would: one that needs more than the x86-64 baseline ISA (glibc 2.33 made
// ldconfig record that level in the cache entry, Debian 12's 2.36 records
// none, and which ldconfig the host has is not known here), and one whose
// SONAME is not a plain file name (the image chose it, and the SONAME link
// is made under that name: the confined ldconfig makes what it makes of
// it).
func rebuildable(cp string, lib ldcache.Library) error {
	if lib.AboveBaseline {
		return fmt.Errorf("%s needs more than the x86-64 baseline ISA: %w", cp, ErrRebuildUnsupported)
	}
	if s := lib.SONAME; strings.ContainsRune(s, '/') || s == "." || s == ".." {
		return fmt.Errorf("%s: SONAME %q is not a file name: %w", cp, s, ErrRebuildUnsupported)
	}
	return nil
}

// sonameLink makes l.Dir/l.Key (dfd the directory, -1 when it does not
// exist yet) a symlink to l.Name as ldconfig's create_links does: nothing when it leads to that file already (a
// relative link to the name, or any path to the same file), a new link
// when there is nothing or a symlink to something else, nothing (logged by
// ldconfig as "not a symbolic link") when another file is there.
func (r *Root) sonameLink(l ldcache.DirLib, dfd int) (bool, error) {
	if dfd < 0 {
		// Not opened by the scan: a directory only pending mounts will
		// make, made here.
		return true, r.Symlink(l.Name, l.Dir+"/"+l.Key)
	}
	var lst unix.Stat_t
	switch err := unix.Fstatat(dfd, l.Key, &lst, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
	case err != nil:
		return false, r.errorf(l.Dir+"/"+l.Key, err)
	case lst.Mode&unix.S_IFMT == unix.S_IFLNK:
		if t, err := readlinkat(dfd, l.Key); err == nil && t == l.Name {
			return false, nil
		}
		if r.sameFile(l.Dir+"/"+l.Key, l.Dir+"/"+l.Name) {
			return false, nil
		}
	default:
		// A regular file (or other object): ldconfig leaves it, whether
		// it is the library itself (a hard link) or not.
		return false, nil
	}
	if err := r.symlinkAt(dfd, l.Key, l.Name, l.Dir+"/"+l.Key); err != nil {
		return false, err
	}
	return true, nil
}

// removeSymlink removes the symlink cp from its directory, open as dfd
// (journaled: Rollback puts it back).
func (r *Root) removeSymlink(dfd int, cp string) error {
	name := path.Base(cp)
	old, err := readlinkat(dfd, name)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return r.errorf(cp, err)
	}
	if err := unix.Unlinkat(dfd, name, 0); err != nil && err != unix.ENOENT {
		return r.errorf(cp, fmt.Errorf("remove dangling link: %w", err))
	}
	r.record(r.undoSymlink(dfd, name, old))
	return nil
}
