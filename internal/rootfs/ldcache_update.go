package rootfs

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
	"golang.org/x/sys/unix"
)

// Container paths UpdateLdCache reads and writes.
const (
	ldSoCache      = "/etc/ld.so.cache"
	ldSoConf       = "/etc/ld.so.conf"
	ldSoConfDropIn = "/etc/ld.so.conf.d/00-nctk.conf"
	// ldSoConfSystemDropIn lists the image's system library directories,
	// named to be read after every other drop-in.
	ldSoConfSystemDropIn = "/etc/ld.so.conf.d/zz-nctk-system.conf"
	// ldSoConfInclude is the /etc/ld.so.conf written for an image that
	// has none, so that the drop-in counts.
	ldSoConfInclude = "include /etc/ld.so.conf.d/*.conf\n"
)

// UpdateLdCache adds the libraries libs to the container's
// /etc/ld.so.cache in-process, with what ldconfig run over their
// directories would record for them, without running ldconfig:
//
//   - libs are container paths of injected library files and of the links
//     created to them (SONAME links, libcuda.so); each is resolved inside
//     the root, read (ELF headers only) and classified by ldcache.EntriesFor
//     as ldconfig classifies directory entries. Names ldconfig ignores, and
//     dangling links, are skipped.
//   - The image's cache is read inside the root and kept, minus its entries
//     for the same names in the same directories; a missing or unparsable
//     cache starts empty. Its glibc-hwcaps extension is kept.
//   - The result, sorted as ldconfig sorts (the loader's binary search needs
//     it), replaces /etc/ld.so.cache atomically (a temporary file in /etc
//     renamed over it, mode 0644; a symlink there is replaced, never
//     followed).
//   - With confDirs, /etc/ld.so.conf.d/00-nctk.conf lists them (and
//     /etc/ld.so.conf including ld.so.conf.d is created when the image has
//     none), so the container's own later ldconfig runs keep them: the same
//     files RunLdconfig's ConfDropIn writes. A musl image (one with a
//     /lib/ld-musl-<arch>.so.1 loader), whose loader reads no
//     ld.so.cache, gets confDirs in /etc/ld-musl-<arch>.path
//     (updateMuslPath) as well.
//
// Every change is journaled (Rollback removes created files and restores
// replaced ones). log may be nil.
func (r *Root) UpdateLdCache(libs, confDirs []string, log *slog.Logger) error {
	names, err := r.libraryEntries(libs, nil, nil)
	if err != nil {
		return err
	}
	return r.UpdateLdCacheFor(names, confDirs, log)
}

// UpdateLdCacheFor is UpdateLdCache with the library directory entries
// already known: names are what ldconfig would find in the container's
// library directories (ldcache.EntriesFor classifies them), for instance
// read from the host files that will be mounted there
// (PendingLibraryEntries),
// before the mounts exist. Nothing is resolved or read for them in the root;
// the image's cache, the atomic write and the conf drop-in are as in
// UpdateLdCache. log may be nil.
func (r *Root) UpdateLdCacheFor(names []ldcache.DirEntry, confDirs []string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkLibDirs(confDirs); err != nil {
		return fmt.Errorf("update ld.so.cache: %w", err)
	}
	added := ldcache.EntriesFor(names)

	var base *ldcache.Cache
	data, err := r.ReadFile(ldSoCache, ldcache.MaxSize)
	switch {
	case err == nil:
		if base, err = ldcache.Parse(data); err != nil {
			log.Warn("the image's ld.so.cache is not usable; writing a new one", "path", ldSoCache, "error", err)
			base = nil
		}
	case errors.Is(err, unix.ENOENT):
	default:
		log.Warn("cannot read the image's ld.so.cache; writing a new one", "path", ldSoCache, "error", err)
	}
	out, err := ldcache.Encode(base.Update(added))
	if err != nil {
		return r.errorf(ldSoCache, err)
	}
	if len(confDirs) > 0 {
		if err := r.writeConfDropIn(confDirs); err != nil {
			return err
		}
		if err := r.updateMuslPath(confDirs, log); err != nil {
			return err
		}
	}
	if err := r.WriteFile(ldSoCache, out, 0o644); err != nil {
		return err
	}
	log.Debug("ld.so.cache updated in-process", "added", len(added), "bytes", len(out))
	return nil
}

// fileID identifies a file (links to one file are inspected once).
type fileID struct{ dev, ino uint64 }

// libScan holds what UpdateLdCache opened or learnt so far: directory
// descriptors by path, and inspected libraries by file.
type libScan struct {
	dirs  map[string]int
	libs  map[fileID]ldcache.Library
	facts LibFacts // nil: none
	// learn, when set, says which inspected files the facts learn (nil:
	// all).
	learn func(st *unix.Stat_t) bool
	// statLinks: an image link met in a directory scan is followed by
	// linkedLibrary (image directories, where a link may lead to a device
	// node).
	statLinks bool
	// dangling are the container paths of the links statLinks found
	// leading nowhere.
	dangling []string
	// pendingFiles and pendingLinks (by cleaned container path; nil for
	// none) are what will exist in the root later: an image link whose
	// target is one of them is followed there.
	pendingFiles map[string]PendingFile
	pendingLinks map[string]string
	// entries counts the directory entries a rebuild's scan read.
	entries int
	// dirIDs are the identities of the directories openScanDir opened.
	dirIDs map[string]fileID
}

func (r *Root) newLibScan() libScan {
	return libScan{dirs: map[string]int{}, libs: map[fileID]ldcache.Library{}, facts: r.libFacts}
}

// LibFacts remember what inspecting library files found, by file identity
// (hostfacts.LibFacts keeps them across processes): Library answers for a
// file it knows (found), Learn records an inspection.
type LibFacts interface {
	Library(st *unix.Stat_t) (lib ldcache.Library, isLib, found bool)
	Learn(st *unix.Stat_t, lib ldcache.Library, isLib bool)
}

// UseLibFacts makes UpdateLdCache ask f before reading a library's ELF
// headers, and tell it what it read.
func (r *Root) UseLibFacts(f LibFacts) { r.libFacts = f }

func (s *libScan) close() {
	for _, fd := range s.dirs {
		unix.Close(fd)
	}
}

// readFlags open a library file for inspection.
const readFlags = unix.O_RDONLY | unix.O_NOCTTY | unix.O_NONBLOCK

// libraryEntries returns the library directory entries for libs once the
// pending file mounts and symlinks (by cleaned container path; nil for
// none) exist: paths they provide are followed by pendingLibrary, the
// others are the image's (libraryEntry).
func (r *Root) libraryEntries(libs []string, mounts map[string]PendingFile, links map[string]string) ([]ldcache.DirEntry, error) {
	sc := r.newLibScan()
	defer sc.close()
	out := make([]ldcache.DirEntry, 0, len(libs))
	for _, l := range libs {
		cp, err := clean(l)
		if err != nil {
			return nil, r.errorf(l, err)
		}
		dir, name, err := split(cp)
		if err != nil {
			return nil, r.errorf(cp, err)
		}
		if !ldcache.IsLibraryName(name) {
			continue
		}
		var de ldcache.DirEntry
		ok := false
		_, isLink := links[cp]
		if _, mounted := mounts[cp]; mounted || isLink {
			de = ldcache.DirEntry{Dir: dir, Name: name, IsLink: isLink}
			de.Lib, ok, err = r.pendingLibrary(&sc, cp, mounts, links)
		} else {
			de, ok, err = r.libraryEntry(&sc, cp, dir, name)
		}
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, de)
		}
	}
	return out, nil
}

// libraryEntry inspects the image's library cp (dir/name) inside the root.
// ok is false for what ldconfig would not record (a dangling link, not an
// ELF shared object of this architecture).
func (r *Root) libraryEntry(sc *libScan, cp, dir, name string) (ldcache.DirEntry, bool, error) {
	dfd, ok := sc.dirs[dir]
	if !ok {
		var err error
		if dfd, err = r.openDir(dir); err != nil {
			return ldcache.DirEntry{}, false, r.errorf(dir, err)
		}
		sc.dirs[dir] = dfd
	}
	var lst unix.Stat_t
	if err := unix.Fstatat(dfd, name, &lst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return ldcache.DirEntry{}, false, r.errorf(cp, err)
	}
	isLink := lst.Mode&unix.S_IFMT == unix.S_IFLNK
	var lib ldcache.Library
	var err error
	if lib, isLib, found := sc.known(&lst); found {
		// A file seen already, or one the facts know by its identity
		// (the lstat of a regular file is the file's): not opened.
		if !isLib {
			return ldcache.DirEntry{}, false, nil
		}
		return ldcache.DirEntry{Dir: dir, Name: name, Lib: lib}, true, nil
	}
	if isLink {
		// With pending files the link is read once here; the shortcut
		// below starts from what was read ("": it reads the link itself).
		var text string
		if sc.pendingFiles != nil || sc.pendingLinks != nil {
			text, _ = readlinkat(dfd, name)
		}
		if target, pending := sc.pendingTarget(dir, text); pending {
			lib, ok, err = r.pendingLibrary(sc, target, sc.pendingFiles, sc.pendingLinks)
		} else if sc.statLinks {
			lib, ok, err = r.linkedLibrary(sc, cp)
		} else {
			lib, ok, err = r.linkOrInRootLibrary(sc, dfd, cp, name, text)
		}
	} else {
		// Not a link: open it in the directory already resolved.
		fd, oerr := OpenNoFollow(dfd, name, readFlags)
		lib, ok, err = r.inspectOpened(sc, cp, fd, oerr)
	}
	if err != nil || !ok {
		return ldcache.DirEntry{}, false, err
	}
	return ldcache.DirEntry{Dir: dir, Name: name, IsLink: isLink, Lib: lib}, true, nil
}

// linkOrInRootLibrary inspects the image link cp (name in the directory
// dfd; text, when not "", what the link holds, read already). A link whose
// chain stays in that directory (sameDirTarget: the driver's SONAME and
// development links a hook made) is answered by the file it ends at,
// opened there only when not known already; any other is opened inside
// the root (inRootLibrary).
func (r *Root) linkOrInRootLibrary(sc *libScan, dfd int, cp, name, text string) (ldcache.Library, bool, error) {
	target, st, ok := sameDirTarget(dfd, name, text)
	if !ok {
		return r.inRootLibrary(sc, cp)
	}
	if lib, isLib, found := sc.known(st); found {
		return lib, isLib, nil
	}
	fd, err := OpenNoFollow(dfd, target, readFlags)
	return r.inspectOpened(sc, cp, fd, err)
}

// sameDirTarget follows the link name in the directory dfd through links
// whose targets are names in that same directory (no "/", not "." or "..":
// what opening it inside the root would follow there too) to the regular
// file it ends at: that file's name and lstat, with one readlinkat and one
// lstat per hop (text, when not "", is what name holds, read already: its
// hop reads nothing). ok is false for anything else (a target elsewhere, a
// dangling or looping link, a directory).
func sameDirTarget(dfd int, name, text string) (target string, st *unix.Stat_t, ok bool) {
	cur := name
	for range maxLinkHops {
		t := text
		text = ""
		var err error
		if t == "" {
			t, err = readlinkat(dfd, cur)
		}
		if err != nil || t == "" || t == "." || t == ".." || strings.ContainsRune(t, '/') {
			return "", nil, false
		}
		var tst unix.Stat_t
		if err := unix.Fstatat(dfd, t, &tst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return "", nil, false
		}
		switch tst.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			return t, &tst, true
		case unix.S_IFLNK:
			cur = t
		default:
			return "", nil, false
		}
	}
	return "", nil, false
}

// pendingTarget returns the container path an image link in dir holding
// t points to, when a pending file or link will be there ("" t: none).
func (sc *libScan) pendingTarget(dir, t string) (string, bool) {
	if t == "" || (sc.pendingFiles == nil && sc.pendingLinks == nil) {
		return "", false
	}
	if !path.IsAbs(t) {
		t = path.Join(dir, t)
	}
	t = path.Clean(t)
	_, file := sc.pendingFiles[t]
	_, link := sc.pendingLinks[t]
	return t, file || link
}

// linkedLibrary is inRootLibrary for the image's link cp met in a
// directory scan: what it leads to is looked at first and opened only when
// it is a regular file not known already; a link that leads nowhere is
// noted in sc.dangling.
func (r *Root) linkedLibrary(sc *libScan, cp string) (ldcache.Library, bool, error) {
	fd, err := r.resolve(cp, unix.O_PATH)
	if err == nil {
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err == nil {
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				return ldcache.Library{}, false, nil
			}
			if lib, isLib, found := sc.known(&st); found {
				return lib, isLib, nil
			}
			return r.inRootLibrary(sc, cp)
		}
	}
	if err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR {
		sc.dangling = append(sc.dangling, cp)
	}
	return r.inspectOpened(sc, cp, -1, err)
}

// inRootLibrary resolves cp inside the root and inspects the file it leads
// to.
func (r *Root) inRootLibrary(sc *libScan, cp string) (ldcache.Library, bool, error) {
	fd, err := r.resolve(cp, readFlags)
	return r.inspectOpened(sc, cp, fd, err)
}

// inspectOpened inspects the file fd that opening cp returned (with
// openErr). A path that leads nowhere (ENOENT, ELOOP, ENOTDIR: a dangling
// link) is skipped, as ldconfig skips it.
func (r *Root) inspectOpened(sc *libScan, cp string, fd int, openErr error) (ldcache.Library, bool, error) {
	if openErr == unix.ENOENT || openErr == unix.ELOOP || openErr == unix.ENOTDIR {
		return ldcache.Library{}, false, nil
	}
	if openErr != nil {
		return ldcache.Library{}, false, r.errorf(cp, openErr)
	}
	defer unix.Close(fd)
	lib, ok, err := sc.inspect(fd)
	if err != nil {
		return ldcache.Library{}, false, r.errorf(cp, err)
	}
	return lib, ok, nil
}

// inspect reads what ldconfig records about the open file f (once per
// file). ok is false, with no error, for what ldconfig skips: not a
// regular file, not an ELF shared object of this architecture.
func (sc *libScan) inspect(fd int) (ldcache.Library, bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ldcache.Library{}, false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ldcache.Library{}, false, nil
	}
	if lib, isLib, found := sc.known(&st); found {
		return lib, isLib, nil
	}
	id := fileID{st.Dev, st.Ino}
	lib, err := ldcache.Inspect(fdReader(fd), st.Size)
	learn := sc.facts != nil && (sc.learn == nil || sc.learn(&st))
	if errors.Is(err, ldcache.ErrNotLibrary) {
		if learn {
			sc.facts.Learn(&st, ldcache.Library{}, false)
		}
		return ldcache.Library{}, false, nil
	}
	if err != nil {
		return ldcache.Library{}, false, err
	}
	sc.libs[id] = lib
	if learn && !lib.AboveBaseline { // the facts do not keep the ISA level
		sc.facts.Learn(&st, lib, true)
	}
	return lib, true, nil
}

// known answers for the regular file st describes without reading it: a
// library this scan inspected already, or one the facts know. found is
// false for anything else (not a regular file, never seen).
func (sc *libScan) known(st *unix.Stat_t) (lib ldcache.Library, isLib, found bool) {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ldcache.Library{}, false, false
	}
	id := fileID{st.Dev, st.Ino}
	if lib, seen := sc.libs[id]; seen {
		return lib, true, true
	}
	if sc.facts == nil {
		return ldcache.Library{}, false, false
	}
	lib, isLib, found = sc.facts.Library(st)
	if found && isLib {
		sc.libs[id] = lib
	}
	return lib, isLib, found
}

// maxLinkHops bounds the chains of pending symlinks PendingLibraryEntries
// follows (the kernel's limit for path resolution).
const maxLinkHops = 40

// PendingFile is a host file the caller will bind-mount into the root.
type PendingFile struct {
	// Path is the container path the file will be mounted at.
	Path string
	// Source is the host path of the file.
	Source string
	// Library, when known already (from discovery), is what ld.so.cache
	// records about the file; nil: Source is read.
	Library *ldcache.Library
}

// PendingLink is a symlink the caller will create in the root: Path (a
// container path) pointing to Target.
type PendingLink struct {
	Path   string
	Target string
}

// Pending is what the caller will create in the root later: file mounts
// and symlinks.
type Pending struct {
	Files []PendingFile
	Links []PendingLink
}

// PendingLibraryEntries returns the library directory entries that
// UpdateLdCache would find for libs (container paths of pending library
// files and links) once pending exists, without creating any of it: for a
// path where a file will be mounted, that HOST file (PendingFile.Source,
// opened on the host) is inspected, unless what it holds is known already
// (PendingFile.Library); for a path where a link will be created, the
// link's target is followed through the pending links and files (relative
// targets against the link's directory), and a target that pending does
// not provide is resolved inside the root, as the loader would. Names
// ldconfig ignores, and links that lead nowhere, are skipped, as
// UpdateLdCache skips them. Nothing in the root is modified.
//
// The result is for UpdateLdCacheFor, so that the cache can be written
// before the container's mounts exist (nvidia-container-runtime does it
// before the low-level runtime runs).
func (r *Root) PendingLibraryEntries(pending Pending, libs []string) ([]ldcache.DirEntry, error) {
	mounts := map[string]PendingFile{}
	for _, f := range pending.Files {
		mounts[path.Clean(f.Path)] = f
	}
	links := map[string]string{}
	for _, l := range pending.Links {
		links[path.Clean(l.Path)] = l.Target
	}
	return r.libraryEntries(libs, mounts, links)
}

// pendingLibrary inspects the file the container path cp will resolve to
// once the pending mounts and links (by container path) exist.
func (r *Root) pendingLibrary(sc *libScan, cp string, mounts map[string]PendingFile, links map[string]string) (ldcache.Library, bool, error) {
	for range maxLinkHops {
		if m, ok := mounts[cp]; ok {
			if m.Library != nil {
				return *m.Library, true, nil // known from discovery
			}
			// A missing source is left out here: runc's bind mount of
			// it fails the create.
			src := m.Source
			fd, err := hostfile.OpenFD(src, hostfile.MaxLibrary)
			if errors.Is(err, os.ErrNotExist) {
				return ldcache.Library{}, false, nil
			}
			if err != nil {
				return ldcache.Library{}, false, fmt.Errorf("library %s for %s: %w", src, cp, err)
			}
			defer unix.Close(fd)
			lib, ok, err := sc.inspect(fd)
			if err != nil {
				return ldcache.Library{}, false, fmt.Errorf("library %s for %s: %w", src, cp, err)
			}
			return lib, ok, nil
		}
		target, ok := links[cp]
		if !ok {
			return r.inRootLibrary(sc, cp)
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(cp), target)
		}
		cp = path.Clean(target)
	}
	return ldcache.Library{}, false, nil // a loop: the loader gets ELOOP
}

// fdReader reads a file descriptor at offsets (pread), as an io.ReaderAt.
type fdReader int

func (fd fdReader) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pread(int(fd), p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

// checkLibDirs checks that dirs are absolute paths, each fit for one line
// of ld.so.conf.
func checkLibDirs(dirs []string) error {
	for _, d := range dirs {
		if !path.IsAbs(d) || strings.ContainsAny(d, "\x00\n") {
			return fmt.Errorf("library directory %q is not an absolute path", d)
		}
	}
	return nil
}

// confDropIn is the content of /etc/ld.so.conf.d/00-nctk.conf listing dirs
// (checked by checkLibDirs).
func confDropIn(dirs []string) string {
	return "# Written by nctk (nvidia-cdi-hook update-ldcache): NVIDIA driver library directories.\n" + strings.Join(dirs, "\n") + "\n"
}

// systemDirsDropIn is the content of /etc/ld.so.conf.d/zz-nctk-system.conf
// listing dirs.
func systemDirsDropIn(dirs []string) string {
	return strings.Join(dirs, "\n") + "\n"
}

// imageSystemDirs are the directories the image's own glibc ldconfig and
// loader search without configuration, for the Go architecture goarch:
// Debian's multiarch patch makes them the multiarch directories and then
// /lib and /usr/lib; upstream glibc searches /lib and /usr/lib, and on
// 64-bit x86, Arm and POWER also lib64 (x86-64 also libx32) beside each.
func imageSystemDirs(debianLike bool, goarch string) []string {
	triplets := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu"}
	var dirs []string
	if debianLike {
		if t, ok := triplets[goarch]; ok {
			dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
		}
		return append(dirs, "/lib", "/usr/lib")
	}
	dirs = append(dirs, "/lib", "/usr/lib")
	switch goarch {
	case "amd64":
		dirs = append(dirs, "/lib64", "/usr/lib64", "/libx32", "/usr/libx32")
	case "arm64", "ppc64le":
		dirs = append(dirs, "/lib64", "/usr/lib64")
	}
	return dirs
}

// writeConfDropIn writes /etc/ld.so.conf.d/00-nctk.conf listing dirs, and
// /etc/ld.so.conf including ld.so.conf.d when the image has none (a symlink
// there counts as present).
func (r *Root) writeConfDropIn(dirs []string) error {
	if err := r.writeConfInclude(); err != nil {
		return err
	}
	return r.writeConf(ldSoConfDropIn, confDropIn(dirs))
}

// writeConf writes content to the configuration file p (mode 0644) unless
// p holds it already (a restarted container).
func (r *Root) writeConf(p, content string) error {
	if old, err := r.ReadFile(p, 64<<10); err == nil && string(old) == content {
		return nil
	}
	return r.WriteFile(p, []byte(content), 0o644)
}

// writeConfInclude creates /etc/ld.so.conf including ld.so.conf.d when the
// image has none (a symlink there counts as present).
func (r *Root) writeConfInclude() error {
	dfd, err := r.mkdirAll("/etc", 0o755)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	err = unix.Fstatat(dfd, "ld.so.conf", &st, unix.AT_SYMLINK_NOFOLLOW)
	unix.Close(dfd)
	if err == unix.ENOENT {
		return r.WriteFile(ldSoConf, []byte(ldSoConfInclude), 0o644)
	}
	return nil
}

// muslDefaultPath is the library path of musl's loader when the image has
// no /etc/ld-musl-<arch>.path.
var muslDefaultPath = []string{"/lib", "/usr/local/lib", "/usr/lib"}

// muslArchIn returns the architecture in the name of a musl loader among
// the names of /lib (ld-musl-<arch>.so.1), or "" when there is none: the
// image is not a musl image.
func muslArchIn(names []string) string {
	slices.Sort(names)
	for _, n := range names {
		if arch, ok := strings.CutPrefix(n, "ld-musl-"); ok {
			if arch, ok = strings.CutSuffix(arch, ".so.1"); ok && arch != "" && !strings.Contains(arch, "/") {
				return arch
			}
		}
	}
	return ""
}

// muslPath returns the content of /etc/ld-musl-<arch>.path listing dirs
// for musl's loader, and whether it differs from old: an existing file
// (exists) keeps its entries (colon or newline separated) and gets each of
// dirs it lacks after them; a new file lists dirs, then musl's default path
// (which the file replaces).
func muslPath(old []byte, exists bool, dirs []string) (string, bool) {
	var entries, add []string
	if exists {
		entries, add = strings.FieldsFunc(string(old), func(c rune) bool { return c == ':' || c == '\n' }), dirs
	} else {
		add = slices.Concat(dirs, muslDefaultPath)
	}
	changed := !exists
	for _, d := range add {
		if !slices.Contains(entries, d) {
			entries, changed = append(entries, d), true
		}
	}
	return strings.Join(entries, "\n") + "\n", changed
}

// updateMuslPath makes musl's loader search dirs in a musl image (one with
// /lib/ld-musl-<arch>.so.1, resolved inside the root), which has no
// ld.so.cache: /etc/ld-musl-<arch>.path as muslPath words it. A glibc
// image is left alone. The write is UpdateLdCache's (atomic, journaled).
func (r *Root) updateMuslPath(dirs []string, log *slog.Logger) error {
	if len(dirs) == 0 {
		return nil
	}
	names, err := r.ReadDir("/lib")
	if err != nil {
		return nil // no /lib: no musl loader
	}
	arch := muslArchIn(names)
	if arch == "" {
		return nil
	}
	p := "/etc/ld-musl-" + arch + ".path"
	data, err := r.ReadFile(p, 64<<10)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	content, changed := muslPath(data, err == nil, dirs)
	if !changed {
		return nil
	}
	if err := r.WriteFile(p, []byte(content), 0o644); err != nil {
		return err
	}
	log.Debug("musl loader path updated", "path", p, "dirs", dirs)
	return nil
}
