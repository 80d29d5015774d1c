package discover

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/devnum"
	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
	"github.com/nctk/nctk/internal/procfs"
	"github.com/nctk/nctk/internal/runcache"
)

// Default locations, inside the driver root.
const (
	DefaultLdCache    = "/etc/ld.so.cache"
	DefaultMPSPipeDir = "/tmp/nvidia-mps"
)

// DefaultSearchPath returns the binary directories searched when
// Options.SearchPath is nil: the standard PATH, then the directories
// driver installations keep their tools in when not on PATH (GKE-style and
// the H100 host's /usr/local/nvidia/bin, Debian's /usr/lib/nvidia/current).
func DefaultSearchPath() []string {
	return []string{
		"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
		"/usr/local/nvidia/bin", "/usr/lib/nvidia/current",
	}
}

// discoverer carries the state of one Discover call.
type discoverer struct {
	opts    Options
	root    *inRoot // the driver root
	dev     *pinned // the dev root
	proc    *pinned // the proc root
	pins    []*pinned
	log     *slog.Logger
	d       *Driver
	devs    procfs.Devices // /proc/devices
	ldcache string         // host path of the ld.so.cache used
	cache   *ldcache.Cache // its entries (nil before libraries)
	// load is the kernel module's load (moduleLoad) once procCache met the
	// proc root as procfs; "" otherwise.
	load string
	// rc is the run cache directory once runCache opened it (rcOpened).
	rc       *runcache.Dir
	rcOpened bool
	elfBuf   [4096]byte // scratch for ELF header reads
}

// Discover finds the NVIDIA driver, GPUs, device nodes and driver files
// under opts.Root. Errors that make the result useless are returned typed:
// *NoDriverError, *VersionMismatchError, *LdCacheError, *DeviceNodeError
// (a node that exists with the wrong device numbers). Anything merely
// absent (a library, a binary, a socket, a GPU's device node) is left out
// and described in Driver.Warnings.
func Discover(opts Options) (*Driver, error) {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	if !filepath.IsAbs(root) {
		abs, err := filepath.Abs(root)
		if err != nil {
			return nil, fmt.Errorf("driver root %q: %w", opts.Root, err)
		}
		root = abs
	}
	devRoot := root
	if opts.DevRoot != "" {
		devRoot = filepath.Clean(opts.DevRoot)
	}
	procRoot := root
	if opts.ProcRoot != "" {
		procRoot = filepath.Clean(opts.ProcRoot)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Every read goes through descriptors of the three roots, opened once
	// (see pinned): a root renamed away and back during discovery is read
	// whole or not at all.
	x := &discoverer{opts: opts, log: log, d: &Driver{Root: root}}
	rootPin := x.pin(root)
	x.root = newInRoot(root, rootPin)
	x.dev, x.proc = x.pin(devRoot), x.pin(procRoot)
	defer func() {
		for _, p := range x.pins {
			p.close()
		}
	}()
	// A root that cannot be opened is no driver: read by name, a root
	// renamed away as it was opened and back a moment later would be read
	// in part (some files found, others not) without an error.
	// The error names the version file when the driver or proc root is
	// the one missing, as NVIDIA's does (the file discovery reads first).
	for _, p := range x.pins {
		if p.openErr != nil {
			path := p.path
			if p == rootPin || p == x.proc {
				path = x.procPath(procfs.VersionPath)
			}
			return nil, &NoDriverError{Root: root, Path: path, Err: p.openErr}
		}
	}
	d, err := x.run()
	if err != nil {
		return nil, &pinnedError{err: err, pins: x.pins}
	}
	return d, nil
}

// pin pins dir once per discovery (the dev and proc roots are usually the
// driver root).
func (x *discoverer) pin(dir string) *pinned {
	for _, p := range x.pins {
		if p.path == dir {
			return p
		}
	}
	p := pin(dir)
	x.pins = append(x.pins, p)
	return p
}

// clean returns err with its message naming host paths instead of the
// pinned descriptors' (for the errors typed errors wrap).
func (x *discoverer) clean(err error) error {
	if err == nil {
		return nil
	}
	return &pinnedError{err: err, pins: x.pins}
}

// run runs the discovery steps.
func (x *discoverer) run() (*Driver, error) {
	steps := []func() error{
		x.version,
		x.devices,
		x.controlNodes,
		x.gpus,
		x.imexChannels,
		x.features,
		x.libraries,
		x.binaries,
		x.ipcs,
		x.firmware,
		x.graphics,
		x.procFiles,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	x.d.ident = x.identity()
	if x.opts.Probe {
		x.probe(context.Background())
	}
	return x.d, nil
}

// Probe asks the driver for the facts only it knows, as Options.Probe does
// during Discover (with opts.ProbeCUDAOnly limiting it likewise), and fills
// them into d, a result of Discover: for callers that learn only after
// discovery that they need them, without discovering everything again.
func Probe(d *Driver, opts Options) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	x := &discoverer{opts: opts, log: log, d: d}
	x.probe(context.Background())
}

// join returns the host path of an absolute path below base.
func join(base, p string) string {
	if base == "/" {
		return p
	}
	return base + p
}

// procPath returns the host path of a proc root file, for results and
// messages; procLoc where system calls find it, procAt the path to read
// it by for those that take no directory descriptor.
func (x *discoverer) procPath(p string) string { return x.proc.host(p) }
func (x *discoverer) procLoc(p string) loc     { return x.proc.loc(p) }
func (x *discoverer) procAt(p string) string   { return x.proc.at(p) }

func (x *discoverer) warn(msg string, args ...any) {
	m := fmt.Sprintf(msg, args...)
	for _, p := range x.pins {
		m = p.unpin(m)
	}
	x.d.Warnings = append(x.d.Warnings, m)
	x.log.Warn(m)
}

// version reads the kernel module version.
func (x *discoverer) version() error {
	p := x.procPath(procfs.VersionPath)
	// up to ~0.7 ms a read on an H100 host: kept in the run cache (procCache).
	dir, key := x.procCache(versionKind, []string{procfs.VersionPath}, "")
	v, err := loadOrRead(x, dir, versionKind, key, func() (procfs.Version, error) {
		return readProc(x.procLoc(procfs.VersionPath), procfs.ParseVersion)
	})
	if err != nil {
		return &NoDriverError{Root: x.root.root, Path: p, Err: x.clean(err)}
	}
	x.d.Version = v.NVRM
	x.log.Info("kernel module", "version", v.NVRM, "open", v.Open, "path", p)
	return nil
}

// devices reads /proc/devices. A missing or unparsable file is not fatal:
// nodes are then accepted with whatever major they have. A FIFO, device or
// oversized file in its place is an error naming it.
func (x *discoverer) devices() error {
	p := x.procPath(procfs.DevicesPath)
	devs, err := readProc(x.procLoc(procfs.DevicesPath), procfs.ParseDevices)
	if errors.Is(err, hostfile.ErrNotRegular) || errors.Is(err, hostfile.ErrTooLarge) {
		return fmt.Errorf("read device majors: %w", err)
	}
	if err != nil {
		x.log.Warn("cannot read device majors", "path", p, "err", x.clean(err))
		return nil
	}
	x.devs = devs
	return nil
}

// major returns the character major of a /proc/devices name, and whether
// it is known.
func (x *discoverer) major(name string) (uint32, bool) { return x.devs.CharMajor(name) }

// node stats p under the dev root. wantMajor/wantMinor < 0 accept any
// number. It returns ok=false if the node does not exist, and a
// *DeviceNodeError if it exists but is not the expected character device.
func (x *discoverer) node(p string, wantMajor, wantMinor int64) (DeviceNode, bool, error) {
	host := x.dev.host(p)
	var st unix.Stat_t
	if err := x.dev.loc(p).stat(&st); err != nil {
		if isNotExist(err) {
			return DeviceNode{}, false, nil
		}
		return DeviceNode{}, false, fmt.Errorf("stat device node %s: %w", host, errors.Unwrap(err))
	}
	mode := fileMode(st.Mode)
	maj, min := devMajor(st.Rdev), devMinor(st.Rdev)
	e := &DeviceNodeError{Path: p, HostPath: host, Major: uint32(max(wantMajor, 0)), Minor: uint32(max(wantMinor, 0)),
		GotMajor: maj, GotMinor: min}
	if mode&fs.ModeCharDevice == 0 || mode&fs.ModeDevice == 0 {
		e.Reason = "found " + fileKind(mode)
		return DeviceNode{}, false, e
	}
	if (wantMajor >= 0 && int64(maj) != wantMajor) || (wantMinor >= 0 && int64(min) != wantMinor) {
		if wantMajor < 0 {
			e.Major = maj
		}
		if wantMinor < 0 {
			e.Minor = min
		}
		return DeviceNode{}, false, e
	}
	return DeviceNode{Path: p, HostPath: host, Major: maj, Minor: min, Mode: uint32(mode.Perm()),
		UID: st.Uid, GID: st.Gid}, true, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	}
	return "another file type"
}

// controlNodes finds nvidiactl, nvidia-uvm, nvidia-uvm-tools and
// nvidia-modeset.
func (x *discoverer) controlNodes() error {
	uvm := int64(-1)
	if m, ok := x.major(procfs.DevNVIDIAUVM); ok {
		uvm = int64(m)
	}
	for _, n := range []struct {
		path         string
		major, minor int64
	}{
		{"/dev/nvidiactl", devnum.MajorNVIDIA, devnum.MinorCtl},
		{"/dev/nvidia-uvm", uvm, devnum.MinorUVM},
		{"/dev/nvidia-uvm-tools", uvm, devnum.MinorUVMTools},
		{"/dev/nvidia-modeset", devnum.MajorNVIDIA, devnum.MinorModeset},
	} {
		node, ok, err := x.node(n.path, n.major, n.minor)
		if err != nil {
			return err
		}
		if !ok {
			x.warn("missing device %s", n.path)
			continue
		}
		x.d.ControlNodes = append(x.d.ControlNodes, node)
	}
	return nil
}

// procFiles records the /proc/driver/nvidia files a container's view of
// that directory copies.
func (x *discoverer) procFiles() error {
	for _, f := range []string{procfs.ParamsPath, procfs.VersionPath, procfs.RegistryPath} {
		var st unix.Stat_t
		if err := x.procLoc(f).stat(&st); err == nil {
			x.d.ProcFiles = append(x.d.ProcFiles, x.procPath(f))
		}
	}
	return nil
}

// baseHasVersion reports whether a file name ends with ".<version>", the
// rule NVIDIA uses to tell the driver's own libraries from others.
func baseHasVersion(p, version string) bool {
	return version != "" && strings.HasSuffix(path.Base(p), "."+version)
}
