package hostfacts

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/rootfs"
)

// ldconfigDirsFile keeps the built-in directories of the host's ldconfig
// binaries nvidia-cdi-hook used, by file identity, in the CDI cache
// directory.
const ldconfigDirsFile = "ldconfig-dirs"

// ldconfigDirsMagic starts the file; a line per binary follows: its
// identity (device, inode, size, mtime and ctime in nanoseconds) and its
// directories, separated by spaces.
const ldconfigDirsMagic = "nctk-ldconfig-dirs 1"

// maxLdconfigBinaries bounds the lines kept (several ldconfig paths, or a
// host's ldconfig updated in place).
const maxLdconfigBinaries = 8

// LdconfigSystemDirs returns the built-in system directories of the host
// ldconfig at hostPath: the ones kept in cacheDir for that file (same
// identity), else those rootfs.ProbeSystemDirs finds by running it, which
// are then kept (atomically, mode 0600, under the same trust rules as the
// other CDI caches). A cache that cannot be read or written costs a probe
// per call, nothing else.
func LdconfigSystemDirs(ctx context.Context, cacheDir, hostPath string) ([]string, error) {
	return ldconfigSystemDirs(cacheDir, hostPath, func() ([]string, error) { return rootfs.ProbeSystemDirs(ctx, hostPath) })
}

// ldconfigSystemDirs is LdconfigSystemDirs with the probe given.
func ldconfigSystemDirs(cacheDir, hostPath string, probe func() ([]string, error)) ([]string, error) {
	var st unix.Stat_t
	if err := unix.Stat(hostPath, &st); err != nil {
		return nil, fmt.Errorf("ldconfig %s: %w", hostPath, err)
	}
	id := idOf(&st).String()
	var lines []string
	if cacheDir != "" {
		if data, ok := ReadTrusted(cacheDir, filepath.Join(cacheDir, ldconfigDirsFile), maxFile); ok {
			known, rest, err := parseLdconfigDirs(string(data), id)
			if err == nil && known != nil {
				return known, nil
			}
			lines = rest
		}
	}
	dirs, err := probe()
	if err != nil {
		return nil, err
	}
	if cacheDir == "" {
		return dirs, nil
	}
	if len(lines) >= maxLdconfigBinaries {
		lines = lines[len(lines)-maxLdconfigBinaries+1:]
	}
	lines = append(lines, id+" "+strings.Join(dirs, " "))
	data := ldconfigDirsMagic + "\n" + strings.Join(lines, "\n") + "\n"
	if CheckDir(cacheDir, true) == nil {
		// Not kept: the next call probes again.
		_ = atomicfile.WriteFile(filepath.Join(cacheDir, ldconfigDirsFile), []byte(data), atomicfile.Options{Mode: 0o600})
	}
	return dirs, nil
}

// parseLdconfigDirs reads the cache file: the directories of the binary
// with identity id (nil when it has none), and the other binaries' lines.
func parseLdconfigDirs(data, id string) (dirs, others []string, err error) {
	first, rest, ok := strings.Cut(data, "\n")
	if !ok || first != ldconfigDirsMagic {
		return nil, nil, fmt.Errorf("ldconfig directories cache: not a %q file", ldconfigDirsMagic)
	}
	for line := range strings.SplitSeq(strings.TrimSuffix(rest, "\n"), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.Count(f[0], ":") != 4 {
			return nil, nil, fmt.Errorf("ldconfig directories cache: bad line %q", line)
		}
		for _, d := range f[1:] {
			if !path.IsAbs(d) || path.Clean(d) != d || d == "/" {
				return nil, nil, fmt.Errorf("ldconfig directories cache: bad directory %q", d)
			}
		}
		for _, n := range strings.Split(f[0], ":") {
			if _, err := strconv.ParseInt(n, 10, 64); err != nil {
				return nil, nil, fmt.Errorf("ldconfig directories cache: bad identity %q", f[0])
			}
		}
		if f[0] == id {
			dirs = f[1:]
			continue
		}
		others = append(others, line)
	}
	return dirs, others, nil
}
