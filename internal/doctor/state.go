package doctor

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/procfs"
	"github.com/nctk/nctk/internal/request"
)

// hostState is what the checks look at, each part read once, when a check
// first asks for it.
type hostState struct {
	o                         Options
	root, driverRoot, devRoot string
	log                       *slog.Logger
	version                   *procfs.Version
	versionErr                error
	versionRead               bool
	drv                       *discover.Driver
	drvErr                    error
	drvRead                   bool
	cfg                       *config.Config
	cfgPath                   string
	cfgErr                    error
	cfgRead                   bool
	bundle                    *bundleState
	bundleRead                bool
	probed                    bool
	cdi                       *pkgcdi.Cache
	cdiErr                    error
	cdiRead                   bool
}

// bundleState is the container of Options.Bundle.
type bundleState struct {
	doc    *ocispec.Doc
	rootfs string
	req    request.Request
	// err is why the bundle could not be read (the other fields are then
	// unset); reqErr why its request is invalid.
	err, reqErr error
}

func newHostState(o Options) *hostState {
	h := &hostState{o: o, root: o.HostRoot, driverRoot: o.DriverRoot, devRoot: o.DevRoot, log: o.Logger}
	if h.root == "" {
		h.root = "/"
	}
	if h.driverRoot == "" {
		h.driverRoot = h.root
	}
	if h.devRoot == "" {
		h.devRoot = h.driverRoot
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	return h
}

// host returns the host path of the absolute path p.
func (h *hostState) host(p string) string { return hostPath(h.root, p) }

// kernelVersion reads /proc/driver/nvidia/version.
func (h *hostState) kernelVersion() (*procfs.Version, error) {
	if !h.versionRead {
		h.versionRead = true
		v, err := procfs.ReadVersion(h.host(procfs.VersionPath))
		if err == nil {
			h.version = &v
		}
		h.versionErr = err
	}
	return h.version, h.versionErr
}

// moduleLoaded reports whether the kernel module's version file reads.
func (h *hostState) moduleLoaded() bool {
	_, err := h.kernelVersion()
	return err == nil
}

// driver runs discovery once (no probe).
func (h *hostState) driver() (*discover.Driver, error) {
	if !h.drvRead {
		h.drvRead = true
		h.drv, h.drvErr = discover.Discover(h.discoverOptions())
	}
	return h.drv, h.drvErr
}

func (h *hostState) discoverOptions() discover.Options {
	o := discover.Options{Root: h.driverRoot, DevRoot: h.devRoot, ProcRoot: h.root, ProbeConfig: h.o.ProbeConfig,
		ProbeCUDAOnly: true, Logger: h.log}
	if h.cfgOK() != nil && h.cfg.CLI.LdCache != "" {
		o.LdCache = h.cfg.CLI.LdCache
	}
	return o
}

// cudaVersion asks the driver for its CUDA version (once, cached on disk
// by the probe), for requirement checks.
func (h *hostState) cudaVersion() (*discover.Driver, error) {
	d, err := h.driver()
	if err != nil {
		return nil, err
	}
	if !h.probed {
		h.probed = true
		discover.Probe(d, h.discoverOptions())
	}
	return d, nil
}

// config loads config.toml once.
func (h *hostState) config() (*config.Config, string, error) {
	if !h.cfgRead {
		h.cfgRead = true
		p, must := h.o.ConfigFile, true
		if p == "" {
			var rel string
			rel, must = config.Path(h.o.Environ)
			p = h.host(rel)
		}
		h.cfgPath = p
		h.cfg, h.cfgErr = config.LoadFile(p, must)
		if h.cfg != nil && h.cfg.Path == "" {
			h.cfgPath = ""
		}
	}
	return h.cfg, h.cfgPath, h.cfgErr
}

// cfgOK returns the config, or nil when it does not load.
func (h *hostState) cfgOK() *config.Config {
	c, _, err := h.config()
	if err != nil {
		return nil
	}
	return c
}

// effectiveConfig is the config, or the defaults when it does not load
// (its own check reports that).
func (h *hostState) effectiveConfig() *config.Config {
	if c := h.cfgOK(); c != nil {
		return c
	}
	return config.DefaultFor(h.root)
}

// specDirs are the CDI spec directories to check, as host paths.
func (h *hostState) specDirs() []string {
	if len(h.o.SpecDirs) > 0 {
		return h.o.SpecDirs
	}
	var out []string
	for _, d := range h.effectiveConfig().Runtime.Modes.CDI.SpecDirs {
		out = append(out, h.host(d))
	}
	return out
}

// engineWanted reports whether the engine checks of name run.
func (h *hostState) engineWanted(name string) bool {
	return len(h.o.Engines) == 0 || slices.Contains(h.o.Engines, name)
}

// container loads Options.Bundle once; nil without a bundle.
func (h *hostState) container() *bundleState {
	if h.o.Bundle == "" {
		return nil
	}
	if !h.bundleRead {
		h.bundleRead = true
		b := &bundleState{}
		h.bundle = b
		doc, err := ocispec.Load(filepath.Join(h.o.Bundle, "config.json"))
		if err != nil {
			b.err = err
			return b
		}
		b.doc = doc
		if b.rootfs, err = doc.RootPath(h.o.Bundle); err != nil {
			b.err = err
			return b
		}
		b.req, b.reqErr = request.FromSpec(doc.Spec(), h.effectiveConfig())
	}
	return h.bundle
}

// env returns the value of the container's environment variable k.
func (b *bundleState) env(k string) (string, bool) {
	s := b.doc.Spec()
	if s.Process == nil {
		return "", false
	}
	val, found := "", false
	for _, kv := range s.Process.Env {
		if name, v, ok := strings.Cut(kv, "="); ok && name == k {
			val, found = v, true
		}
	}
	return val, found
}

// exists reports whether the host path p exists (following links).
func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// lexists reports whether the host path p exists (not following links).
func lexists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil || !errors.Is(err, os.ErrNotExist)
}

// binDirs are the directories searched for host binaries (a daemon's
// default PATH).
func binDirs() []string {
	return []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
}

// findBinary returns the host path of an executable name on the default
// PATH below the host root, or "".
func (h *hostState) findBinary(name string) string {
	for _, d := range binDirs() {
		p := h.host(filepath.Join(d, name))
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}
