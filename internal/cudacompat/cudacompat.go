// Package cudacompat decides whether a container image's CUDA
// forward-compatibility libraries (the libcuda.so.<version> of a newer
// driver branch that nvidia/cuda images ship in /usr/local/cuda/compat,
// from the cuda-compat package) are to be used over the host driver's, and
// puts them first in the loader's search inside the container root:
// NVIDIA's enable-cuda-compat hook's result, done in process. Every path is
// resolved inside the root (internal/rootfs), the library is read as data
// (its ELF note; never loaded), and nothing is mounted. nvidia-cdi-hook's
// enable-cuda-compat, nvidia-container-cli configure and
// nvidia-container-runtime all decide with this package.
package cudacompat

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/rootfs"
	"golang.org/x/sys/unix"
)

// Container paths of enable-cuda-compat.
const (
	ldSoConfD = "/etc/ld.so.conf.d"
	// confPrefix and confSuffix frame the names of the ld.so.conf.d
	// drop-ins that list CUDA compat directories: NVIDIA's hook writes
	// 00-compat-<uuid>.conf, nctk Conf. "00-" sorts them before the other
	// drop-ins.
	confPrefix = "00-compat-"
	confSuffix = ".conf"
	// Conf is the drop-in nctk writes.
	Conf = ldSoConfD + "/" + confPrefix + "nctk" + confSuffix
	// compatNote is the ELF note section in which libcuda states the CUDA
	// version and the driver branches it is a forward-compatibility
	// library for.
	compatNote      = ".note.cuda.fwd_compatibility"
	compatNoteOwner = "NVIDIA Corporation"
	// maxCompatNote bounds that section.
	maxCompatNote = 64 << 10
	// shtNote is the ELF section type of notes (SHT_NOTE).
	shtNote = 7
)

// Select returns the container path of the image's compat libcuda in dir
// (find) when it is to be used over a host driver of version hostDriver
// supporting CUDA hostCuda (newer), "" otherwise. Errors are those of
// find and newer: a compat library that is not a regular file, or too
// large, is refused.
func Select(r *rootfs.Root, dir, hostDriver, hostCuda string, log *slog.Logger) (string, error) {
	if hostDriver == "" && hostCuda == "" {
		return "", nil
	}
	lib, err := find(r, dir, log)
	if err != nil || lib == "" {
		return "", err
	}
	use, err := newer(r, lib, hostDriver, hostCuda, log)
	if err != nil || !use {
		return "", err
	}
	return lib, nil
}

// Enable makes the compat directory dir the loader's first choice in the
// container: Conf lists it (and /etc/ld.so.conf including ld.so.conf.d is
// created if the image has none), and the libraries of the compat
// directories are put ahead of the driver's in ld.so.cache (Promote).
// Every change is journaled by r (Rollback undoes it).
func Enable(r *rootfs.Root, dir string, log *slog.Logger) error {
	if err := writeConf(r, dir); err != nil {
		return err
	}
	log.Debug("CUDA compat libraries enabled", "dir", dir)
	return Promote(r, log)
}

// Configure writes the drop-in of Enable without updating ld.so.cache, for
// a caller that rebuilds the cache from the configuration next (as
// ldconfig run after enable-cuda-compat does) and then calls Promote.
func Configure(r *rootfs.Root, dir string) error { return writeConf(r, dir) }

// find returns the container path of the one regular file named
// libcuda.so.*.* in dir, or "" (with a log line) when dir is missing or
// holds none or several. Symlinks of that name are not counted (as
// NVIDIA's hook); a FIFO, socket or device of that name is an error.
func find(r *rootfs.Root, dir string, log *slog.Logger) (string, error) {
	names, err := r.ReadDir(dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		log.Debug("no CUDA compat directory in the container", "dir", dir)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	var libs []string
	for _, n := range names {
		if ok, _ := path.Match("libcuda.so.*.*", n); !ok {
			continue
		}
		p := path.Join(dir, n)
		st, err := r.Lstat(p)
		if err != nil {
			return "", err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			libs = append(libs, p)
		case unix.S_IFLNK, unix.S_IFDIR:
		default:
			return "", fmt.Errorf("CUDA compat library %s (in container root %s): %w", p, r.Path(), hostfile.ErrNotRegular)
		}
	}
	switch len(libs) {
	case 0:
		log.Debug("no CUDA compat library in the container", "dir", dir)
		return "", nil
	case 1:
		return libs[0], nil
	}
	log.Warn("several CUDA compat libraries in the container; none used", "libs", libs)
	return "", nil
}

// newer opens the compat library lib (a regular file of at most
// hostfile.MaxLibrary bytes) and decides with useCompat.
func newer(r *rootfs.Root, lib, hostDriver, hostCuda string, log *slog.Logger) (bool, error) {
	f, err := r.OpenRegular(lib, hostfile.MaxLibrary)
	if err != nil {
		return false, fmt.Errorf("CUDA compat library: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("CUDA compat library: %w", err)
	}
	note, err := readCompatNote(f, st.Size())
	if err != nil {
		log.Warn("cannot read the CUDA compat library's ELF note", "lib", lib, "error", err)
	}
	return useCompat(strings.TrimPrefix(path.Base(lib), "libcuda.so."), hostDriver, hostCuda, note, log), nil
}

// compatInfo is the JSON payload of compatNote.
type compatInfo struct {
	CUDAVersion string `json:"CUDA Version"`
	Driver      []int  `json:"Driver"`
}

// readCompatNote reads compatNote from the ELF file f of size bytes (its
// section headers and that section only); nil without one, or when its
// owner is not NVIDIA's.
func readCompatNote(f io.ReaderAt, size int64) (*compatInfo, error) {
	s, found, err := ldcache.FindSection(f, size, compatNote)
	if err != nil {
		return nil, err
	}
	if !found || s.Type != shtNote {
		return nil, nil
	}
	if s.Size > maxCompatNote {
		return nil, fmt.Errorf("%s: %d bytes, limit %d", compatNote, s.Size, maxCompatNote)
	}
	if s.Offset > uint64(size) || s.Size > uint64(size)-s.Offset {
		return nil, fmt.Errorf("%s: section outside the file", compatNote)
	}
	data := make([]byte, s.Size)
	if _, err := f.ReadAt(data, int64(s.Offset)); err != nil {
		return nil, fmt.Errorf("%s: %w", compatNote, err)
	}
	if len(data) < 12 {
		return nil, fmt.Errorf("%s: truncated note", compatNote)
	}
	nameSize := uint64(binary.LittleEndian.Uint32(data[0:]))
	descSize := uint64(binary.LittleEndian.Uint32(data[4:]))
	if nameSize == 0 || descSize == 0 || nameSize > uint64(len(data)) || descSize > uint64(len(data)) {
		return nil, nil
	}
	name := string(bytes.Trim(data[12:min(uint64(len(data)), 12+nameSize)], "\x00"))
	if name != compatNoteOwner {
		return nil, nil
	}
	// The descriptor follows the name padded to the section's alignment
	// (NVIDIA's reading); the ELF specification's 4 bytes is tried too.
	var lastErr error
	for _, align := range []uint64{max(s.Addralign, 1), 4} {
		off := 12 + (nameSize+align-1)&^(align-1)
		if off >= uint64(len(data)) {
			continue
		}
		desc := bytes.Trim(data[off:min(uint64(len(data)), off+descSize)], "\x00")
		var info compatInfo
		if lastErr = json.Unmarshal(desc, &info); lastErr == nil {
			return &info, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", compatNote, lastErr)
}

// dotted is a numeric dotted version ("580.159.04", "13.0"): up to three
// components, missing ones 0.
type dotted [3]int

// parseVersion reads a version; ok is false for anything else (a
// pre-release or build suffix, a non-number, more than three components).
func parseVersion(s string) (dotted, bool) {
	var v dotted
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || strings.HasPrefix(p, "+") {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func (v dotted) compare(w dotted) int { return slices.Compare(v[:], w[:]) }

// useCompat decides as NVIDIA 1.20's hook whether the compat library of
// version compat (from its file name) is used over a host driver of
// version hostDriver supporting CUDA hostCuda (either may be ""):
//
//   - with the library's note: when both the compat and the host driver
//     versions are known, the host driver's major must be one of the
//     note's Driver branches and compat newer than it; otherwise, with a
//     host CUDA version, the note's CUDA version must be newer than it;
//   - without a note: never when a host CUDA version was given (only the
//     note can be compared with it); else compat's major must be greater
//     than the host driver's.
func useCompat(compat, hostDriver, hostCuda string, note *compatInfo, log *slog.Logger) bool {
	cv, cok := parseVersion(compat)
	hv, hok := parseVersion(hostDriver)
	uv, uok := parseVersion(hostCuda)
	if !cok {
		log.Warn("cannot parse the CUDA compat library's version", "version", compat)
	}
	if hostDriver != "" && !hok {
		log.Warn("cannot parse the host driver version", "version", hostDriver)
	}
	if hostCuda != "" && !uok {
		log.Warn("cannot parse the host CUDA version", "version", hostCuda)
	}
	if note != nil {
		if !cok || !hok {
			if !uok {
				return false
			}
			nv, ok := parseVersion(note.CUDAVersion)
			return ok && nv.compare(uv) > 0
		}
		return slices.Contains(note.Driver, hv[0]) && cv.compare(hv) > 0
	}
	if hostCuda != "" || !cok || !hok {
		return false
	}
	if cv[0] > hv[0] {
		return true
	}
	log.Debug("the CUDA compat library's major version is not above the host driver's", "compat", compat, "host", hostDriver)
	return false
}

// writeConf writes Conf listing dir (mode 0644, replacing one
// from an earlier start) and /etc/ld.so.conf including ld.so.conf.d when
// the image has none.
func writeConf(r *rootfs.Root, dir string) error {
	if strings.ContainsAny(dir, "\n\x00") {
		return fmt.Errorf("CUDA compat directory %q: not one line", dir)
	}
	if _, err := r.Lstat("/etc/ld.so.conf"); errors.Is(err, unix.ENOENT) {
		if err := r.WriteFile("/etc/ld.so.conf", []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644); err != nil {
			return err
		}
	}
	return r.WriteFile(Conf, []byte(dir+"\n"), 0o644)
}

// Dirs returns the directories the image's ld.so.conf.d compat
// drop-ins (00-compat-*.conf, from either toolkit's enable-cuda-compat)
// list, in drop-in name order.
func Dirs(r *rootfs.Root) ([]string, error) {
	names, err := r.ReadDir(ldSoConfD)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var dirs []string
	for _, n := range names {
		if !strings.HasPrefix(n, confPrefix) || !strings.HasSuffix(n, confSuffix) {
			continue
		}
		data, err := r.ReadFile(ldSoConfD+"/"+n, 64<<10)
		if err != nil {
			return nil, err
		}
		for line := range strings.Lines(string(data)) {
			d := strings.TrimSpace(line)
			if path.IsAbs(d) && !slices.Contains(dirs, path.Clean(d)) {
				dirs = append(dirs, path.Clean(d))
			}
		}
	}
	return dirs, nil
}

// Promote puts the libraries of the compat directories (Dirs)
// ahead of every other entry of the same name in the container's
// ld.so.cache (Root.UpdateLdCache: the entries it adds come first), so
// that the loader finds the compat libcuda.so.1 before the driver's. An
// update-ldcache run after enable-cuda-compat calls it again, as its own
// entries would otherwise come first.
func Promote(r *rootfs.Root, log *slog.Logger) error {
	dirs, err := Dirs(r)
	if err != nil || len(dirs) == 0 {
		return err
	}
	var libs []string
	for _, d := range dirs {
		names, err := r.ReadDir(d)
		if err != nil {
			log.Warn("CUDA compat directory not readable", "dir", d, "error", err)
			continue
		}
		slices.Sort(names)
		for _, n := range names {
			if ldcache.IsLibraryName(n) {
				libs = append(libs, path.Join(d, n))
			}
		}
	}
	if len(libs) == 0 {
		return nil
	}
	log.Debug("CUDA compat libraries first in ld.so.cache", "dirs", dirs, "libs", len(libs))
	return r.UpdateLdCache(libs, nil, log)
}
