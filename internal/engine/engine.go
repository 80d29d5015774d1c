// Package engine edits container engines' configuration files so that they
// know the NVIDIA runtime: Docker's daemon.json, containerd's config.toml
// (config versions 1, 2 and 3, optionally through a drop-in file) and
// CRI-O's crio.conf (optionally through a drop-in file). It is the library
// behind `nvidia-ctk runtime configure`.
//
// Each engine is a type implementing Kind in a file of its own (docker.go,
// containerd.go, crio.go) and one line in kinds, the registry Lookup and
// Plan consult: adding an engine is adding a file and that line.
//
// What is written follows NVIDIA's nvidia-ctk 1.20 case by case (see
// docs/runtime-configure.md): the runtime's own entry is rebuilt from the
// engine's base runtime, and a drop-in file is nvidia-ctk's own, rewritten
// whole from the main configuration on every run. A main file that is
// edited keeps the rest of its content: other runtimes, unknown keys and
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
	"path/filepath"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/hostfile"
)

// Engine names a container engine (the names are in the engines' files).
type Engine string

// Kind is a container engine Plan can configure: where its configuration
// lives, how the runtime is registered in it, and what to restart
// afterwards.
type Kind interface {
	// Name is the engine's name, as `--runtime` takes it.
	Name() Engine
	// Aliases are other names Lookup accepts for the engine.
	Aliases() []string
	// DefaultConfigPath is the engine's main configuration file.
	DefaultConfigPath() string
	// DefaultDropInPath is the drop-in file nvidia-ctk writes for the
	// engine, or "" when the engine reads no drop-in files (Plan then
	// ignores Request.DropInPath, with a note).
	DefaultDropInPath() string
	// RuntimeByName reports whether the engine takes the runtime
	// executable as a bare name it looks up in its own PATH; otherwise
	// Options.RuntimePath must be absolute.
	RuntimeByName() bool
	// ConfigCommands returns the commands that print the engine's
	// effective configuration (Request.Source), to be tried in order, for
	// an engine whose main configuration file is configPath; nil when the
	// engine has none (Plan then ignores Request.Source, with a note).
	ConfigCommands(configPath string) [][]string
	// Edit registers the runtime in the configuration c, whose files Plan
	// has read, with o completed by its defaults and valid, and returns the
	// files of the new configuration (Result.Files) and notes.
	Edit(c Config, o Options) (*Result, error)
	// Daemon is the process to restart for a changed configuration to take
	// effect.
	Daemon() string
}

// kinds returns the engines Lookup and Plan know, in the order messages
// list them.
func kinds() []Kind {
	return []Kind{
		dockerEngine{},
		containerdEngine{},
		crioEngine{},
	}
}

// Lookup returns the engine called name or one of its aliases (case and
// surrounding space do not matter). An unknown name is an error that lists
// the known ones.
func Lookup(name string) (Kind, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	all := kinds()
	names := make([]string, len(all))
	for i, k := range all {
		if string(k.Name()) == n || slices.Contains(k.Aliases(), n) {
			return k, nil
		}
		names[i] = string(k.Name())
	}
	want := names[0]
	if len(names) > 1 {
		want = strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
	return nil, fmt.Errorf("unknown runtime %q (want %s)", name, want)
}

// Defaults used when a Request leaves a field empty.
const (
	DefaultRuntimeName = "nvidia"
	DefaultRuntimePath = "/usr/bin/nvidia-container-runtime"
)

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
	// containerd: enable_cdi, whose spec directories default to /etc/cdi
	// and /var/run/cdi; CRI-O: always on, no-op).
	EnableCDI bool
}

func (o Options) withDefaults() Options {
	if o.RuntimeName == "" {
		o.RuntimeName = DefaultRuntimeName
	}
	if o.RuntimePath == "" {
		o.RuntimePath = DefaultRuntimePath
	}
	return o
}

// validate checks o, with its defaults, for engine k.
func (o Options) validate(k Kind) error {
	if strings.ContainsAny(o.RuntimeName, "\x00\n") || strings.TrimSpace(o.RuntimeName) != o.RuntimeName {
		return fmt.Errorf("invalid runtime name %q", o.RuntimeName)
	}
	if !k.RuntimeByName() && !filepath.IsAbs(o.RuntimePath) {
		return fmt.Errorf("runtime path %q must be absolute for %s", o.RuntimePath, k.Name())
	}
	return nil
}

// Request is one `runtime configure` invocation.
type Request struct {
	// Engine is the engine's name or an alias (see Lookup).
	Engine Engine
	// ConfigPath is the engine's main configuration file (default: the
	// engine's DefaultConfigPath). A missing file counts as empty.
	ConfigPath string
	// DropInPath, when set, receives the runtime instead of ConfigPath
	// (containerd config versions 2 and 3, CRI-O). For containerd the main
	// file is then only given an `imports` entry for the drop-in's
	// directory. Ignored, with a note, for Docker and for containerd
	// version 1 configs.
	DropInPath string
	// Source, when non-nil, is the engine's effective configuration (for
	// example `containerd config dump`), used instead of ConfigPath's
	// content to find the existing runtime settings to copy. Ignored, with
	// a note, for engines without ConfigCommands (Docker).
	Source []byte
	Options
}

// Config is an engine's configuration as Plan read it: what Kind.Edit
// works on.
type Config struct {
	// Main is the main configuration file.
	Main ConfigFile
	// DropIn is the drop-in file; its Path is "" outside drop-in mode and
	// absolute in it.
	DropIn ConfigFile
	// Source is Request.Source: nil, or the effective configuration.
	Source []byte
}

// ConfigFile is a configuration file as it is now.
type ConfigFile struct {
	Path string
	// Data is the content; nil for a missing file, which counts as empty.
	Data []byte
	// Existed reports whether the file exists.
	Existed bool
}

// update is the File that replaces f's content with data.
func (f ConfigFile) update(data []byte) File {
	return File{Path: f.Path, Data: data, Existed: f.Existed, Changed: !f.Existed || !bytes.Equal(data, f.Data)}
}

// read fills in f's Data and Existed from the disk; a missing file is
// empty.
func (f *ConfigFile) read() error {
	data, err := hostfile.ReadFile(f.Path, hostfile.MaxConfig)
	if errors.Is(err, fs.ErrNotExist) {
		f.Data, f.Existed = nil, false
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", f.Path, err)
	}
	f.Data, f.Existed = data, true
	return nil
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
	k, err := Lookup(string(req.Engine))
	if err != nil {
		return nil, err
	}
	o := req.Options.withDefaults()
	if err := o.validate(k); err != nil {
		return nil, err
	}
	c := Config{Main: ConfigFile{Path: req.ConfigPath}, Source: req.Source}
	if c.Main.Path == "" {
		c.Main.Path = k.DefaultConfigPath()
	}
	var notes []string
	if req.DropInPath != "" && k.DefaultDropInPath() == "" {
		notes = append(notes, fmt.Sprintf("%s has no drop-in configuration files; editing %s", k.Name(), c.Main.Path))
		req.DropInPath = ""
	}
	if c.Source != nil && k.ConfigCommands(c.Main.Path) == nil {
		notes = append(notes, fmt.Sprintf("a configuration source other than the file is not supported for %s; using %s", k.Name(), c.Main.Path))
		c.Source = nil
	}
	if err := c.Main.read(); err != nil {
		return nil, err
	}
	if req.DropInPath != "" {
		abs, err := filepath.Abs(req.DropInPath)
		if err != nil {
			return nil, fmt.Errorf("drop-in path %s: %w", req.DropInPath, err)
		}
		c.DropIn.Path = abs
		if err := c.DropIn.read(); err != nil {
			return nil, err
		}
	}
	res, err := k.Edit(c, o)
	if err != nil {
		return nil, err
	}
	res.Notes = append(notes, res.Notes...)
	return res, nil
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
