package discover

import (
	"io/fs"
	"path"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/hostfile"
)

// binaries looks each driver binary up in the search path, every
// directory resolved inside the root. The first executable regular file
// wins, except that a shell-script wrapper (as on hosts whose
// /usr/bin/nvidia-smi only sets LD_LIBRARY_PATH and runs the real one) is
// passed over for a real executable found later: the wrapper would not
// work inside a container.
func (x *discoverer) binaries() error {
	dirs := x.opts.SearchPath
	if dirs == nil {
		dirs = DefaultSearchPath()
	}
	// Resolve each directory once; skip repeats (/bin → /usr/bin).
	var resolved []string
	for _, d := range dirs {
		if !strings.HasPrefix(d, "/") {
			continue // a relative PATH entry has no meaning inside the root
		}
		r, err := x.root.resolve(d)
		if err != nil || slices.Contains(resolved, r) {
			continue
		}
		resolved = append(resolved, r)
	}
	for _, c := range []caps.Capability{caps.Utility, caps.Compute} {
		if x.opts.Caps != nil && !x.opts.Caps.Has(c) {
			continue // not asked for (Options.Caps)
		}
		for _, name := range caps.Binaries(c) {
			var script string
			found := ""
			for _, d := range resolved {
				real, mode, err := x.root.statFollow(path.Join(d, name))
				if err != nil || !mode.IsRegular() || mode.Perm()&0o111 == 0 {
					continue
				}
				if isScript(x.root.loc(real)) {
					if script == "" {
						script = real
					}
					continue
				}
				found = real
				break
			}
			if found == "" {
				found = script
			}
			if found == "" {
				x.warn("missing binary %s", name)
				continue
			}
			x.log.Debug("selecting binary", "path", found)
			x.d.Binaries = append(x.d.Binaries, File{Name: name, Capability: c, Path: found, HostPath: x.root.host(found)})
		}
	}
	return nil
}

// isScript reports whether a file starts with "#!". Like the ELF reads it
// bypasses os.File, whose poller registration is a wasted system call for
// a regular file.
func isScript(l loc) bool {
	fd, err := unix.Openat(l.dirfd, l.name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	var b [2]byte
	n, _ := syscall.Pread(fd, b[:], 0)
	return n == 2 && string(b[:]) == "#!"
}

// ipcs finds the persistenced and fabric manager sockets and the MPS pipe
// directory, resolved inside the root (/var/run → /run).
func (x *discoverer) ipcs() error {
	for _, ipc := range caps.IPCs() {
		candidates := []string{ipc.Path}
		if ipc.Dir && x.opts.MPSPipeDir != "" {
			candidates = []string{x.opts.MPSPipeDir}
		} else if rest, ok := strings.CutPrefix(ipc.Path, "/var/run/"); ok {
			// As NVIDIA's: the first of /run and /var/run that has it (a
			// driver root need not link one to the other).
			candidates = []string{"/run/" + rest, ipc.Path}
		}
		var (
			p, real string
			mode    fs.FileMode
			err     error
		)
		for _, p = range candidates {
			if real, mode, err = x.root.statFollow(p); err == nil {
				break
			}
		}
		if err != nil {
			x.log.Debug("missing ipc path " + p)
			continue
		}
		if ipc.Dir != mode.IsDir() || (!ipc.Dir && mode&fs.ModeSocket == 0) {
			x.warn("ipc path %s is %s, not a %s; ignoring it", p, fileKind(mode), map[bool]string{true: "directory", false: "socket"}[ipc.Dir])
			continue
		}
		x.d.IPCs = append(x.d.IPCs, File{Name: ipc.Name, Capability: ipc.Capability, Path: real, HostPath: x.root.host(real), Dir: ipc.Dir})
	}
	return nil
}

// firmwareDirs returns the directories (inside the root) searched for
// nvidia/<version>/gsp*.bin, in the kernel's order, as NVIDIA's spec
// generator searches them: the firmware_class custom path if set,
// /lib/firmware/updates/<kernel release>, /lib/firmware/updates,
// /lib/firmware/<kernel release>, /lib/firmware; then
// /usr/local/nvidia/firmware where driver bundles such as the H100 host's
// keep it. The kernel release is the running kernel's (uname -r), the
// one that loads the firmware.
func (x *discoverer) firmwareDirs() []string {
	var dirs []string
	if b, err := x.root.loc("/sys/module/firmware_class/parameters/path").readFile(hostfile.MaxProc); err == nil {
		if p := strings.TrimSpace(string(b)); strings.HasPrefix(p, "/") {
			dirs = append(dirs, path.Clean(p))
		}
	}
	var std []string
	var uts unix.Utsname
	release := ""
	if err := unix.Uname(&uts); err == nil {
		release = unix.ByteSliceToString(uts.Release[:])
	}
	if release != "" && !strings.Contains(release, "/") {
		std = append(std, "/lib/firmware/updates/"+release, "/lib/firmware/updates", "/lib/firmware/"+release)
	} else {
		std = append(std, "/lib/firmware/updates")
	}
	for _, d := range append(std, "/lib/firmware", "/usr/local/nvidia/firmware") {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// firmware finds the GSP firmware files of the running driver version.
// Path is the unresolved form (/lib/firmware/nvidia/<ver>/gsp_ga10x.bin),
// which is also where a container gets it; HostPath is resolved.
func (x *discoverer) firmware() error {
	seen := map[string]bool{}
	for _, base := range x.firmwareDirs() {
		dir := path.Join(base, "nvidia", x.d.Version)
		realDir, err := x.root.resolve(dir)
		if err != nil {
			continue
		}
		ents, err := x.root.loc(realDir).readDir()
		if err != nil {
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if !strings.HasPrefix(name, "gsp") || !strings.HasSuffix(name, ".bin") || seen[name] {
				continue
			}
			real, mode, err := x.root.statFollow(path.Join(dir, name))
			if err != nil || !mode.IsRegular() {
				continue
			}
			seen[name] = true
			x.d.Firmware = append(x.d.Firmware, File{Name: name, Path: path.Join(dir, name), HostPath: x.root.host(real)})
		}
	}
	if len(x.d.Firmware) == 0 {
		x.log.Debug("no GSP firmware found", "version", x.d.Version)
	}
	return nil
}
