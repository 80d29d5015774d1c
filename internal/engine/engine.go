// Package engine edits container engines' configuration files so that they
// know the NVIDIA runtime: Docker's daemon.json, containerd's config.toml
// (config versions 1, 2 and 3, optionally through a drop-in file) and
// CRI-O's crio.conf (optionally through a drop-in file). It is the library
// behind `nvidia-ctk runtime configure`.
//
// Every edit keeps the rest of the file: other runtimes, unknown keys and
// settings the engine's own defaults would produce. An edit is idempotent:
// configuring twice gives the same bytes as configuring once, and a file that
// already says what was asked is left byte for byte as it was.
//
// Formatting: daemon.json keeps its key order and is written with two-space
// indentation. TOML files are decoded into maps and encoded again, so when a
// TOML file has to change, its comments and key order are lost (keys come out
// sorted). The one exception is containerd's main file in drop-in mode: when
// it only needs an `imports` entry and has none yet, the line is inserted
// textually and the rest of the file (comments included) is kept.
//
// Plan computes the new contents without touching the disk; Result.Apply
// writes them atomically with package atomicfile (temporary file in the
// same directory, fsync, rename), keeping the mode and owner of the file it
// replaces.
package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nctk/nctk/internal/atomicfile"
)

// Engine names a container engine.
type Engine string

// The engines Plan knows.
const (
	Docker     Engine = "docker"
	Containerd Engine = "containerd"
	CRIO       Engine = "crio"
)

// Defaults used when a Request leaves a field empty.
const (
	DefaultRuntimeName = "nvidia"
	DefaultRuntimePath = "/usr/bin/nvidia-container-runtime"

	DefaultDockerConfig     = "/etc/docker/daemon.json"
	DefaultContainerdConfig = "/etc/containerd/config.toml"
	DefaultContainerdDropIn = "/etc/containerd/conf.d/99-nvidia.toml"
	DefaultCRIOConfig       = "/etc/crio/crio.conf"
	DefaultCRIODropIn       = "/etc/crio/crio.conf.d/99-nvidia.toml"

	// runcShimV2 is the containerd shim that honours options.BinaryName.
	runcShimV2 = "io.containerd.runc.v2"
)

// DefaultCDISpecDirs returns the CDI spec directories written to
// containerd's cdi_spec_dirs when CDI is enabled and the file names none.
func DefaultCDISpecDirs() []string { return []string{"/etc/cdi", "/var/run/cdi"} }

// ParseEngine returns the Engine named s ("docker", "containerd", "crio").
func ParseEngine(s string) (Engine, error) {
	switch e := Engine(strings.ToLower(strings.TrimSpace(s))); e {
	case Docker, Containerd, CRIO:
		return e, nil
	case "cri-o":
		return CRIO, nil
	}
	return "", fmt.Errorf("unknown runtime %q (want docker, containerd or crio)", s)
}

// DefaultConfigPath is the engine's main configuration file.
func (e Engine) DefaultConfigPath() string {
	switch e {
	case Docker:
		return DefaultDockerConfig
	case Containerd:
		return DefaultContainerdConfig
	case CRIO:
		return DefaultCRIOConfig
	}
	return ""
}

// DefaultDropInPath is the drop-in file nvidia-ctk writes for the engine, or
// "" for Docker, which has no drop-in directory.
func (e Engine) DefaultDropInPath() string {
	switch e {
	case Containerd:
		return DefaultContainerdDropIn
	case CRIO:
		return DefaultCRIODropIn
	}
	return ""
}

// Options says what to register.
type Options struct {
	// RuntimeName is the runtime's name in the engine (default "nvidia").
	RuntimeName string
	// RuntimePath is the nvidia-container-runtime executable. containerd
	// and CRI-O need an absolute path; Docker also accepts a name it looks
	// up in its PATH. Default DefaultRuntimePath.
	RuntimePath string
	// SetAsDefault makes the runtime the engine's default runtime.
	SetAsDefault bool
	// EnableCDI turns on the engine's CDI support (Docker: features.cdi;
	// containerd: enable_cdi and cdi_spec_dirs; CRI-O: always on, no-op).
	EnableCDI bool
	// CDISpecDirs is written to containerd's cdi_spec_dirs when CDI is
	// enabled and the config has none; nil means DefaultCDISpecDirs.
	CDISpecDirs []string
}

func (o Options) withDefaults() Options {
	if o.RuntimeName == "" {
		o.RuntimeName = DefaultRuntimeName
	}
	if o.RuntimePath == "" {
		o.RuntimePath = DefaultRuntimePath
	}
	if o.CDISpecDirs == nil {
		o.CDISpecDirs = DefaultCDISpecDirs()
	}
	return o
}

func (o Options) validate(e Engine) error {
	if strings.ContainsAny(o.RuntimeName, "\x00\n") || strings.TrimSpace(o.RuntimeName) != o.RuntimeName {
		return fmt.Errorf("invalid runtime name %q", o.RuntimeName)
	}
	if e != Docker && !filepath.IsAbs(o.RuntimePath) {
		return fmt.Errorf("runtime path %q must be absolute for %s", o.RuntimePath, e)
	}
	return nil
}

// Request is one `runtime configure` invocation.
type Request struct {
	Engine Engine
	// ConfigPath is the engine's main configuration file (default: the
	// engine's DefaultConfigPath). A missing file counts as empty.
	ConfigPath string
	// DropInPath, when set, receives the runtime instead of ConfigPath
	// (containerd config versions 2 and 3, CRI-O). For containerd the main
	// file is then only given an `imports` entry for it. Ignored, with a
	// note, for Docker and for containerd version 1 configs.
	DropInPath string
	// Source, when non-nil, is the engine's effective configuration (for
	// example `containerd config dump`), used instead of ConfigPath's
	// content to find the existing runtime settings to copy. containerd
	// and CRI-O only.
	Source []byte
	Options
}

// File is one file a Plan wants on disk.
type File struct {
	Path string
	// Data is the complete new content.
	Data []byte
	// Changed reports whether Data differs from what is on disk now.
	Changed bool
	// Existed reports whether the file exists now.
	Existed bool
}

// Result is the outcome of Plan.
type Result struct {
	// Files are the files of the new configuration. Files[0] is the one
	// that registers the runtime; a containerd main file whose imports
	// were extended follows it.
	Files []File
	// Notes are remarks for the user (options that had no effect, ...).
	Notes []string
}

// Changed reports whether any file would change.
func (r *Result) Changed() bool {
	for _, f := range r.Files {
		if f.Changed {
			return true
		}
	}
	return false
}

// Plan reads the engine's configuration and computes the new contents. It
// writes nothing.
func Plan(req Request) (*Result, error) {
	switch req.Engine {
	case Docker, Containerd, CRIO:
	default:
		return nil, fmt.Errorf("unknown engine %q", req.Engine)
	}
	req.Options = req.Options.withDefaults()
	if err := req.Options.validate(req.Engine); err != nil {
		return nil, err
	}
	if req.ConfigPath == "" {
		req.ConfigPath = req.Engine.DefaultConfigPath()
	}
	main, mainExisted, err := readConfig(req.ConfigPath)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	if req.Engine == Docker {
		if req.DropInPath != "" {
			res.Notes = append(res.Notes, "docker has no drop-in configuration files; editing "+req.ConfigPath)
		}
		if req.Source != nil {
			res.Notes = append(res.Notes, "a configuration source other than the file is not supported for docker; using "+req.ConfigPath)
		}
		out, err := EditDocker(main, req.Options)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", req.ConfigPath, err)
		}
		res.Files = []File{newFile(req.ConfigPath, out, main, mainExisted)}
		return res, nil
	}

	var dropIn []byte
	dropInExisted := false
	if req.DropInPath != "" {
		abs, err := filepath.Abs(req.DropInPath)
		if err != nil {
			return nil, fmt.Errorf("drop-in path %s: %w", req.DropInPath, err)
		}
		req.DropInPath = abs
		if dropIn, dropInExisted, err = readConfig(req.DropInPath); err != nil {
			return nil, err
		}
	}
	switch req.Engine {
	case Containerd:
		in := ContainerdInput{Main: main, MainPath: req.ConfigPath, DropIn: dropIn, DropInPath: req.DropInPath, Source: req.Source}
		out, err := EditContainerd(in, req.Options)
		if err != nil {
			return nil, err
		}
		res.Notes = append(res.Notes, out.Notes...)
		if out.DropIn != nil {
			res.Files = append(res.Files, newFile(req.DropInPath, out.DropIn, dropIn, dropInExisted))
		}
		res.Files = append(res.Files, newFile(req.ConfigPath, out.Main, main, mainExisted))
		if out.DropIn == nil {
			return res, nil
		}
		// The main file only matters when it changes.
		if !res.Files[1].Changed {
			res.Files = res.Files[:1]
		}
		return res, nil
	default: // CRIO
		if req.Options.EnableCDI {
			res.Notes = append(res.Notes, "CDI is always enabled in CRI-O; --cdi.enabled has no effect")
		}
		target, targetData, targetExisted := req.ConfigPath, main, mainExisted
		var base []byte
		if req.DropInPath != "" {
			target, targetData, targetExisted = req.DropInPath, dropIn, dropInExisted
			base = main
		}
		if req.Source != nil {
			base = req.Source
		}
		baseT, err := parseTOML(base)
		if err != nil {
			if req.Source != nil {
				return nil, fmt.Errorf("configuration source: %w", err)
			}
			return nil, fmt.Errorf("%s: %w", req.ConfigPath, err)
		}
		out, err := editCRIO(targetData, baseT, req.Options)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", target, err)
		}
		res.Files = []File{newFile(target, out, targetData, targetExisted)}
		return res, nil
	}
}

// newFile is the File for path's new content data; old is its content now.
func newFile(path string, data, old []byte, existed bool) File {
	return File{Path: path, Data: data, Existed: existed, Changed: !existed || !bytes.Equal(data, old)}
}

// Apply writes every changed file of r atomically. A symbolic link is
// followed (its target is written, the link stays), the mode and owner of
// the file replaced are kept (0644 and the caller's for a new one), missing
// parent directories are created with mode 0755, and the file and its
// directory are synced: the engine reads the file on its next start, which
// may follow a crash.
func (r *Result) Apply() error {
	for _, f := range r.Files {
		if !f.Changed {
			continue
		}
		if err := atomicfile.WriteFile(f.Path, f.Data, atomicfile.Options{
			Mode: 0o644, KeepExisting: true, FollowSymlinks: true, DirMode: 0o755, Sync: true,
		}); err != nil {
			return fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	return nil
}

// readConfig returns path's content; a missing file is empty.
func readConfig(path string) ([]byte, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, true, nil
}
