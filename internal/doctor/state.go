package doctor

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
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
	ctr                       *containerState
	ctrRead                   bool
	probed                    bool
	cdi                       *pkgcdi.Cache
	cdiErr                    error
	cdiRead                   bool
}

// containerState is the container of Options.Bundle or Options.Image.
type containerState struct {
	// name says which container: "bundle DIR" or "image NAME (engine)".
	name string
	// files is its file tree: the bundle's rootfs or the image's layers.
	files containerFiles
	// env, args and cwd are its process's environment, command and
	// working directory (an image's Env, Entrypoint+Cmd, WorkingDir).
	env  []string
	args []string
	cwd  string
	req  request.Request
	// err is why the container could not be read (the other fields are
	// then unset); reqErr why its request is invalid.
	err, reqErr error
	img         *image
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

// close releases what the checks held open (an image's kept files).
func (h *hostState) close() {
	if h.ctr != nil {
		h.ctr.close()
	}
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

// container loads Options.Bundle or Options.Image once; nil without
// either.
func (h *hostState) container() *containerState {
	if h.o.Bundle == "" && h.o.Image == "" {
		return nil
	}
	if !h.ctrRead {
		h.ctrRead = true
		if h.o.Bundle != "" {
			h.ctr = h.loadBundle()
		} else {
			h.ctr = h.loadImageContainer()
		}
	}
	return h.ctr
}

// loadBundle reads Options.Bundle.
func (h *hostState) loadBundle() *containerState {
	c := &containerState{name: "bundle " + h.o.Bundle}
	doc, err := ocispec.Load(filepath.Join(h.o.Bundle, "config.json"))
	if err != nil {
		c.err = err
		return c
	}
	rootfs, err := doc.RootPath(h.o.Bundle)
	if err != nil {
		c.err = err
		return c
	}
	c.files = rootfsFiles{root: rootfs}
	if p := doc.Spec().Process; p != nil {
		c.env, c.args, c.cwd = p.Env, p.Args, p.Cwd
	}
	c.req, c.reqErr = request.FromSpec(doc.Spec(), h.effectiveConfig())
	return c
}

// loadImageContainer reads Options.Image from the engine that knows it,
// keeping the content of the files the checks read.
func (h *hostState) loadImageContainer() *containerState {
	c := &containerState{name: "image " + h.o.Image}
	im, eng, err := h.loadImage(h.o.Image, func(im *image) []keepFile {
		c.fromImage(im)
		return c.keptFiles()
	})
	if err != nil {
		return &containerState{name: c.name, err: err}
	}
	c.fromImage(im)
	c.name += " (" + eng + ")"
	spec := &specs.Spec{Process: &specs.Process{Env: c.env, Args: c.args, Cwd: c.cwd}}
	c.req, c.reqErr = request.FromSpec(spec, h.effectiveConfig())
	return c
}

// fromImage takes the process and files from an image.
func (c *containerState) fromImage(im *image) {
	c.img, c.files = im, im.files
	c.env = im.config.Env
	c.args = append(slices.Clone(im.config.Entrypoint), im.config.Cmd...)
	c.cwd = im.config.WorkingDir
	if _, ok := c.getenv("PATH"); !ok {
		// The engines' default.
		c.env = append(slices.Clone(c.env), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
}

// keptFiles are the files whose content the checks read: the
// ld.so.cache and the binaries checked for GPU code.
func (c *containerState) keptFiles() []keepFile {
	out := []keepFile{{"/etc/ld.so.cache", ldcache.MaxSize}}
	for _, b := range c.cudaBinaries() {
		out = append(out, keepFile{b, hostfile.MaxLibrary})
	}
	return out
}

// close releases what the container holds open.
func (c *containerState) close() {
	if c != nil {
		c.img.close()
	}
}

// getenv returns the value of the container's environment variable k.
func (c *containerState) getenv(k string) (string, bool) {
	val, found := "", false
	for _, kv := range c.env {
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
