package engine

import (
	"bytes"
	"flag"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestConfigureGolden")

// configureCase is one `runtime configure` run on the engine layer: an
// input file, the options, and (in testdata/configure/want/<name>) the
// files the run writes.
type configureCase struct {
	name   string
	engine Engine
	// in is the main file's content: a file under testdata (relative
	// path), or "" for a missing file.
	in string
	// dropIn selects drop-in mode with the engine's default drop-in path.
	dropIn bool
	// source, when set, is a testdata file used as the effective
	// configuration (--config-source=command).
	source string
	opts   Options
	// notes are substrings the run's notes must contain.
	notes []string
}

// configureCases are the cases of docs/runtime-configure.md. Each one's
// expected files were checked, key by key, against what NVIDIA's
// nvidia-ctk 1.20 writes for the same input and flags; the cases marked
// "differs" are where nctk keeps its own result on purpose (the document
// says why).
func configureCases() []configureCase {
	const rt = "/usr/bin/nvidia-container-runtime"
	o := func(def, cdi bool) Options {
		return Options{RuntimePath: rt, SetAsDefault: def, EnableCDI: cdi}
	}
	return []configureCase{
		// containerd, config version 2: the drop-in holds a copy of the
		// whole CRI plugin table; config.toml imports conf.d/*.toml.
		{name: "containerd-v2-drop-in", engine: Containerd, in: "containerd-v2.toml", dropIn: true, opts: o(false, false)},
		{name: "containerd-v2-drop-in-default-cdi", engine: Containerd, in: "containerd-v2.toml", dropIn: true, opts: o(true, true)},
		// The base runtime is copied whatever its type (kata here).
		{name: "containerd-v2-inherit-kata", engine: Containerd, in: "configure/in/containerd-v2-kata.toml", dropIn: true, opts: o(false, false)},
		// default_runtime_name = "nvidia" is dropped without
		// --set-as-default; an nvidia* default is never the base.
		{name: "containerd-v2-nvidia-default", engine: Containerd, in: "configure/in/containerd-v2-nvidia-default.toml", dropIn: true, opts: o(false, false)},
		// No runtime to copy: runc shim, empty root and engine.
		{name: "containerd-v2-no-runtimes", engine: Containerd, in: "configure/in/containerd-v2-no-runtimes.toml", dropIn: true, opts: o(false, false)},
		{name: "containerd-v2-imports", engine: Containerd, in: "configure/in/containerd-v2-imports.toml", dropIn: true, opts: o(false, false)},
		{name: "containerd-missing", engine: Containerd, dropIn: true, opts: o(false, false)},
		{name: "containerd-missing-custom-name", engine: Containerd, dropIn: true,
			opts: Options{RuntimeName: "nvidia-cdi", RuntimePath: "/usr/bin/nvidia-container-runtime.cdi"}},
		// Differs: NVIDIA's --drop-in-config="" writes the drop-in over
		// config.toml and then the old config.toml over it, losing the
		// runtime; nctk edits config.toml in place.
		{name: "containerd-v2-in-place", engine: Containerd, in: "containerd-v2.toml", opts: o(false, false)},
		// containerd config version 3 (containerd 2.x).
		{name: "containerd-v3-drop-in", engine: Containerd, in: "containerd-v3.toml", dropIn: true, opts: o(true, true)},
		{name: "containerd-v3-default-crun", engine: Containerd, in: "configure/in/containerd-v3-crun.toml", dropIn: true, opts: o(false, true)},
		// The effective configuration (containerd config dump) decides the
		// version and what the drop-in copies.
		{name: "containerd-source-v3", engine: Containerd, dropIn: true, source: "configure/in/containerd-dump-v3.toml", opts: o(false, false)},
		// Version 1: options.Runtime too, and the version written.
		{name: "containerd-v1-in-place", engine: Containerd, in: "containerd-v1.toml", opts: o(true, false)},
		// Differs: NVIDIA writes enable_cdi into plugins.cri.containerd,
		// where containerd does not read it; nctk into plugins.cri.
		{name: "containerd-v1-cdi", engine: Containerd, in: "containerd-v1.toml", opts: o(false, true)},
		// Differs: NVIDIA writes the whole v1 config to the drop-in, which a
		// v1 config cannot import; nctk edits config.toml, with a note.
		{name: "containerd-v1-drop-in", engine: Containerd, in: "containerd-v1.toml", dropIn: true, opts: o(false, false),
			notes: []string{"config version 1 cannot import drop-in files"}},

		// Docker: runtimes.nvidia is {"args": [], "path": ...}.
		{name: "docker-sample", engine: Docker, in: "daemon.json", opts: Options{RuntimePath: "nvidia-container-runtime"}},
		{name: "docker-missing-default-cdi", engine: Docker, opts: Options{RuntimePath: "nvidia-container-runtime", SetAsDefault: true, EnableCDI: true}},
		// An existing entry is replaced whole; default-runtime is left as
		// it is without --set-as-default.
		{name: "docker-nvidia-entry", engine: Docker, in: "configure/in/daemon-nvidia-entry.json", opts: Options{RuntimePath: "nvidia-container-runtime"}},
		// Differs: NVIDIA's --cdi.enabled replaces "features" with
		// {"cdi": true}; nctk keeps the other features.
		{name: "docker-features", engine: Docker, in: "configure/in/daemon-features.json", opts: Options{RuntimePath: "nvidia-container-runtime", EnableCDI: true}},

		// CRI-O: the drop-in holds only the runtime, copied from the base
		// runtime of crio.conf.
		{name: "crio-drop-in", engine: CRIO, in: "crio.conf", dropIn: true, opts: o(false, true),
			notes: []string{"CDI is always enabled in CRI-O"}},
		{name: "crio-drop-in-default", engine: CRIO, in: "crio.conf", dropIn: true, opts: o(true, false)},
		{name: "crio-nvidia-default", engine: CRIO, in: "configure/in/crio-nvidia-default.conf", dropIn: true, opts: o(false, false)},
		{name: "crio-missing", engine: CRIO, dropIn: true, opts: o(true, false)},
		// Differs: NVIDIA's --drop-in-config="" replaces crio.conf with the
		// drop-in's content; nctk edits crio.conf in place.
		{name: "crio-in-place", engine: CRIO, in: "crio.conf", opts: o(true, false)},
	}
}

// TestConfigureGolden runs each configureCase through the engine's Edit
// and compares every file it would write with the golden file of the same
// base name in testdata/configure/want/<case>; a file the run leaves
// unchanged must have no golden file. `go test -run TestConfigureGolden
// -update` rewrites them.
func TestConfigureGolden(t *testing.T) {
	for _, tc := range configureCases() {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Lookup(string(tc.engine))
			if err != nil {
				t.Fatal(err)
			}
			c := Config{Main: ConfigFile{Path: k.DefaultConfigPath()}}
			if tc.in != "" {
				data, err := os.ReadFile(filepath.Join("testdata", tc.in))
				if err != nil {
					t.Fatal(err)
				}
				c.Main.Data, c.Main.Existed = data, true
			}
			if tc.dropIn {
				c.DropIn.Path = k.DefaultDropInPath()
			}
			if tc.source != "" {
				if c.Source, err = os.ReadFile(filepath.Join("testdata", tc.source)); err != nil {
					t.Fatal(err)
				}
			}
			o := tc.opts.withDefaults()
			res, err := k.Edit(c, o)
			if err != nil {
				t.Fatalf("Edit: %v", err)
			}
			for _, n := range tc.notes {
				if !strings.Contains(strings.Join(res.Notes, "\n"), n) {
					t.Errorf("notes %q lack %q", res.Notes, n)
				}
			}
			wantDir := filepath.Join("testdata", "configure", "want", tc.name)
			written := map[string][]byte{}
			for _, f := range res.Files {
				if f.Changed {
					written[path.Base(f.Path)] = f.Data
				}
			}
			if *update {
				if err := os.RemoveAll(wantDir); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(wantDir, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, data := range written {
					if err := os.WriteFile(filepath.Join(wantDir, name), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			entries, err := os.ReadDir(wantDir)
			if err != nil {
				t.Fatalf("no golden files (run with -update): %v", err)
			}
			for _, e := range entries {
				want, err := os.ReadFile(filepath.Join(wantDir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				got, ok := written[e.Name()]
				if !ok {
					t.Errorf("%s not written", e.Name())
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s:\n%s\n--- want:\n%s", e.Name(), got, want)
				}
				delete(written, e.Name())
			}
			for name := range written {
				t.Errorf("%s written but has no golden file", name)
			}

			// A second run on the result writes nothing new.
			again := c
			for _, f := range res.Files {
				switch f.Path {
				case c.Main.Path:
					again.Main.Data, again.Main.Existed = f.Data, true
				case c.DropIn.Path:
					again.DropIn.Data, again.DropIn.Existed = f.Data, true
				}
			}
			res2, err := k.Edit(again, o)
			if err != nil {
				t.Fatalf("second Edit: %v", err)
			}
			if res2.Changed() {
				t.Errorf("second run changes files again")
			}
		})
	}
}

// TestDropInRewritten checks that a drop-in is nvidia-ctk's own file:
// whatever it held is replaced by what the run writes (a drop-in that
// does not parse included), and one that already says the same, however
// formatted, keeps its bytes.
func TestDropInRewritten(t *testing.T) {
	const rt = "/usr/bin/nvidia-container-runtime"
	main := []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n")
	crioMain := []byte("[crio.runtime.runtimes.runc]\nruntime_root = \"/run/runc\"\n")
	tests := []struct {
		name   string
		engine Engine
		main   []byte
		dropIn string
		// gone must not be in the new drop-in; kept reports whether the old
		// bytes stay.
		gone string
		kept bool
	}{
		{name: "containerd garbage", engine: Containerd, main: main, dropIn: "[[", gone: "[["},
		{name: "containerd other content", engine: Containerd, main: main, dropIn: "version = 2\n[plugins.other]\nx = 1\n", gone: "other"},
		{name: "containerd equivalent", engine: Containerd, main: main, kept: true,
			dropIn: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n" +
				"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n" +
				"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"" + rt + "\"\n"},
		{name: "crio garbage", engine: CRIO, main: crioMain, dropIn: "[[", gone: "[["},
		{name: "crio other content", engine: CRIO, main: crioMain, dropIn: "[crio.image]\npause_image = \"x\"\n", gone: "pause_image"},
		{name: "crio equivalent", engine: CRIO, main: crioMain, kept: true,
			dropIn: "[crio.runtime.runtimes.nvidia]\nruntime_root = \"/run/runc\"\nruntime_path = \"" + rt + "\"\nruntime_type = \"oci\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Lookup(string(tt.engine))
			if err != nil {
				t.Fatal(err)
			}
			c := Config{
				Main:   ConfigFile{Path: k.DefaultConfigPath(), Data: tt.main, Existed: true},
				DropIn: ConfigFile{Path: k.DefaultDropInPath(), Data: []byte(tt.dropIn), Existed: true},
			}
			res, err := k.Edit(c, Options{RuntimePath: rt}.withDefaults())
			if err != nil {
				t.Fatalf("Edit: %v", err)
			}
			f := res.Files[0]
			if f.Path != c.DropIn.Path {
				t.Fatalf("first file is %s, want the drop-in", f.Path)
			}
			if tt.kept {
				if f.Changed || string(f.Data) != tt.dropIn {
					t.Errorf("equivalent drop-in rewritten:\n%s", f.Data)
				}
				return
			}
			if !f.Changed || strings.Contains(string(f.Data), tt.gone) {
				t.Errorf("drop-in not replaced (changed %v):\n%s", f.Changed, f.Data)
			}
			if got := mustTOML(t, f.Data); lookup(got, "crio", "runtime", "runtimes", "nvidia", "runtime_path") != rt &&
				lookup(got, "plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "nvidia", "options", "BinaryName") != rt {
				t.Errorf("new drop-in lacks the runtime:\n%s", f.Data)
			}
		})
	}
}

// TestInPlaceNVIDIADefault checks the one place where nctk's base runtime
// differs from NVIDIA's: a file edited in place whose default runtime is
// already an NVIDIA one keeps the runtime's own settings (NVIDIA would copy
// runc's), and without --set-as-default the default is removed.
func TestInPlaceNVIDIADefault(t *testing.T) {
	const rt = "/usr/bin/nvidia-container-runtime"
	ctrd := []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"nvidia\"\n" +
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\nruntime_type = \"io.containerd.runc.v2\"\n" +
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia.options]\nBinaryName = \"/old\"\nSystemdCgroup = true\n" +
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n")
	out, err := EditContainerd(ContainerdInput{Main: ctrd}, Options{RuntimePath: rt})
	if err != nil {
		t.Fatal(err)
	}
	m := mustTOML(t, out.Main)
	ctr := []string{"plugins", "io.containerd.grpc.v1.cri", "containerd"}
	if got := lookup(m, append(ctr, "runtimes", "nvidia", "options", "SystemdCgroup")...); got != true {
		t.Errorf("containerd: own SystemdCgroup = %v, want kept\n%s", got, out.Main)
	}
	if got := lookup(m, append(ctr, "runtimes", "nvidia", "options", "BinaryName")...); got != rt {
		t.Errorf("containerd: BinaryName = %v", got)
	}
	if got := lookup(m, append(ctr, "default_runtime_name")...); got != nil {
		t.Errorf("containerd: default_runtime_name = %v, want removed", got)
	}

	crio := []byte("[crio.runtime]\ndefault_runtime = \"nvidia\"\n[crio.runtime.runtimes.nvidia]\nmonitor_env = [\"A=1\"]\nruntime_path = \"/old\"\n" +
		"[crio.runtime.runtimes.runc]\nruntime_root = \"/run/runc\"\n")
	data, err := EditCRIO(crio, nil, Options{RuntimePath: rt, SetAsDefault: true})
	if err != nil {
		t.Fatal(err)
	}
	c := mustTOML(t, data)
	if got := lookup(c, "crio", "runtime", "runtimes", "nvidia", "monitor_env"); got == nil || lookup(c, "crio", "runtime", "runtimes", "nvidia", "runtime_root") != nil {
		t.Errorf("crio: the runtime's own table was not its base:\n%s", data)
	}
	if got := lookup(c, "crio", "runtime", "default_runtime"); got != "nvidia" {
		t.Errorf("crio: default_runtime = %v", got)
	}
}
