package engine

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// containerdSamples returns the committed sample configs plus, when the
// containerd binary exists, `containerd config default`.
func containerdSamples(t testing.TB) map[string][]byte {
	t.Helper()
	s := map[string][]byte{"empty": nil}
	for _, name := range []string{"containerd-v1.toml", "containerd-v2.toml", "containerd-v3.toml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		s[name] = data
	}
	if p, err := exec.LookPath("containerd"); err == nil {
		out, err := exec.Command(p, "config", "default").Output()
		if err != nil {
			t.Fatalf("containerd config default: %v", err)
		}
		s["containerd config default"] = out
	} else {
		t.Logf("containerd is not installed; `containerd config default` is not among the samples")
	}
	return s
}

func mustTOML(t testing.TB, data []byte) tomlTable {
	t.Helper()
	m, err := parseTOML(data)
	if err != nil {
		t.Fatalf("output is not valid TOML: %v\n%s", err, data)
	}
	return m
}

func lookup(t tomlTable, path ...string) any {
	var cur any = t
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// effectiveContainerd merges a drop-in over the main file the way
// containerd 1.x does: top-level plugin tables are replaced whole.
func effectiveContainerd(main, dropIn tomlTable) tomlTable {
	eff := deepCopy(main).(map[string]any)
	if dropIn == nil {
		return eff
	}
	for k, v := range dropIn {
		if k != "plugins" {
			eff[k] = deepCopy(v)
			continue
		}
		plugins, _ := eff["plugins"].(map[string]any)
		if plugins == nil {
			plugins = tomlTable{}
			eff["plugins"] = plugins
		}
		for pk, pv := range v.(map[string]any) {
			plugins[pk] = deepCopy(pv)
		}
	}
	return eff
}

func TestEditContainerd(t *testing.T) {
	samples := containerdSamples(t)
	modes := []struct {
		name   string
		dropIn string
		opts   Options
	}{
		{name: "in place", opts: Options{}},
		{name: "in place default cdi", opts: Options{SetAsDefault: true, EnableCDI: true}},
		{name: "drop-in", dropIn: "/etc/containerd/conf.d/99-nvidia.toml"},
		{name: "drop-in default cdi", dropIn: "/etc/containerd/conf.d/99-nvidia.toml", opts: Options{SetAsDefault: true, EnableCDI: true}},
	}
	for sname, sample := range samples {
		for _, m := range modes {
			t.Run(sname+"/"+m.name, func(t *testing.T) {
				o := m.opts
				o.RuntimePath = testRuntimePath
				in := ContainerdInput{Main: sample, MainPath: "/etc/containerd/config.toml", DropInPath: m.dropIn}
				out, err := EditContainerd(in, o)
				if err != nil {
					t.Fatalf("EditContainerd: %v", err)
				}
				origT := mustTOML(t, sample)
				version, _ := ContainerdVersion(origT)
				if out.Version != version {
					t.Errorf("version = %d, want %d", out.Version, version)
				}
				mainT := mustTOML(t, out.Main)
				usedDropIn := m.dropIn != "" && version != 1
				var dropT tomlTable
				if usedDropIn {
					if out.DropIn == nil {
						t.Fatal("drop-in mode produced no drop-in")
					}
					dropT = mustTOML(t, out.DropIn)
					imports, _ := stringSlice(mainT["imports"])
					if !containsString(imports, "/etc/containerd/conf.d/*.toml") {
						t.Errorf("main imports = %v, want it to contain the drop-in directory's glob", imports)
					}
					if lookup(dropT, "version") != int64(version) {
						t.Errorf("drop-in version = %v, want %d", lookup(dropT, "version"), version)
					}
					// The main file keeps its comments: only a line was added.
					if bytes.HasPrefix(sample, []byte("#")) && !bytes.Contains(out.Main, sample[:bytes.IndexByte(sample, '\n')]) {
						t.Errorf("main file lost its comment:\n%s", out.Main)
					}
				} else if out.DropIn != nil {
					t.Errorf("in-place mode produced a drop-in")
				}
				if m.dropIn != "" && version == 1 && len(out.Notes) == 0 {
					t.Errorf("version 1 with a drop-in gave no note")
				}
				eff := effectiveContainerd(mainT, dropT)
				if version > 1 && lookup(eff, "version") != int64(version) {
					t.Errorf("effective version = %v, want %d", lookup(eff, "version"), version)
				}
				cri := CRIPluginPath(version)
				rt := append(append([]string{}, cri...), "containerd", "runtimes", "nvidia")
				if got := lookup(eff, append(rt, "runtime_type")...); got != "io.containerd.runc.v2" {
					t.Errorf("runtime_type = %v", got)
				}
				if got := lookup(eff, append(rt, "options", "BinaryName")...); got != testRuntimePath {
					t.Errorf("options.BinaryName = %v", got)
				}
				def := lookup(eff, append(append([]string{}, cri...), "containerd", "default_runtime_name")...)
				if o.SetAsDefault && def != "nvidia" {
					t.Errorf("default_runtime_name = %v, want nvidia", def)
				}
				if !o.SetAsDefault && def != lookup(origT, append(append([]string{}, cri...), "containerd", "default_runtime_name")...) {
					t.Errorf("default_runtime_name changed to %v", def)
				}
				if o.EnableCDI {
					if got := lookup(eff, append(append([]string{}, cri...), "enable_cdi")...); got != true {
						t.Errorf("enable_cdi = %v", got)
					}
					if got := lookup(eff, append(append([]string{}, cri...), "cdi_spec_dirs")...); got != lookup(origT, append(append([]string{}, cri...), "cdi_spec_dirs")...) && got != nil {
						t.Errorf("cdi_spec_dirs written: %v", got)
					}
				}

				// Unrelated settings are kept.
				stripContainerdEdits(t, eff, origT, cri, o)
				if usedDropIn {
					imports, _ := stringSlice(eff["imports"])
					if _, had := origT["imports"]; had {
						eff["imports"] = anySlice(imports[:len(imports)-1])
					} else {
						delete(eff, "imports")
					}
				}
				want := deepCopy(origT).(map[string]any)
				if len(origT) == 0 {
					want["version"] = int64(2)
				}
				if version == 1 {
					want["version"] = int64(1) // written explicitly, as NVIDIA does
				}
				if !reflect.DeepEqual(eff, want) {
					t.Errorf("unrelated settings changed:\n got %v\nwant %v", eff, want)
				}

				// Idempotent.
				in2 := ContainerdInput{Main: out.Main, MainPath: in.MainPath, DropIn: out.DropIn, DropInPath: m.dropIn}
				out2, err := EditContainerd(in2, o)
				if err != nil {
					t.Fatalf("second EditContainerd: %v", err)
				}
				if !bytes.Equal(out2.Main, out.Main) || !bytes.Equal(out2.DropIn, out.DropIn) {
					t.Errorf("not idempotent:\nmain:\n%s\n---\n%s\ndrop-in:\n%s\n---\n%s", out.Main, out2.Main, out.DropIn, out2.DropIn)
				}
			})
		}
	}
}

func containsString(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// stripContainerdEdits removes from eff what EditContainerd added.
func stripContainerdEdits(t *testing.T, eff, orig tomlTable, cri []string, o Options) {
	t.Helper()
	criT, _ := lookup(eff, cri...).(map[string]any)
	origCRI, _ := lookup(orig, cri...).(map[string]any)
	ctrd := criT["containerd"].(map[string]any)
	runtimes := ctrd["runtimes"].(map[string]any)
	delete(runtimes, "nvidia")
	var origCtrd map[string]any
	if origCRI != nil {
		origCtrd, _ = origCRI["containerd"].(map[string]any)
	}
	if origCtrd == nil || origCtrd["runtimes"] == nil {
		delete(ctrd, "runtimes")
	}
	if o.SetAsDefault {
		if v, ok := origCtrd["default_runtime_name"]; ok {
			ctrd["default_runtime_name"] = v
		} else {
			delete(ctrd, "default_runtime_name")
		}
	}
	if origCRI == nil || origCRI["containerd"] == nil {
		delete(criT, "containerd")
	}
	if o.EnableCDI {
		for _, k := range []string{"enable_cdi", "cdi_spec_dirs"} {
			if v, ok := origCRI[k]; ok {
				criT[k] = v
			} else {
				delete(criT, k)
			}
		}
	}
	if origCRI == nil {
		plugins := eff["plugins"].(map[string]any)
		delete(plugins, cri[1])
		if orig["plugins"] == nil {
			delete(eff, "plugins")
		}
	}
}

func TestEditContainerdCopiesRuncOptions(t *testing.T) {
	samples := containerdSamples(t)
	tests := []struct {
		sample string
		want   map[string]any // options of the new runtime besides BinaryName
		keys   map[string]any // other keys of the new runtime table
	}{
		{"containerd-v1.toml", map[string]any{"SystemdCgroup": true}, nil},
		{"containerd-v2.toml", map[string]any{"SystemdCgroup": true}, map[string]any{"privileged_without_host_devices": false}},
		{"containerd-v3.toml", map[string]any{"SystemdCgroup": true}, nil}, // copied from crun, the default
	}
	for _, tt := range tests {
		t.Run(tt.sample, func(t *testing.T) {
			out, err := EditContainerd(ContainerdInput{Main: samples[tt.sample]}, Options{RuntimePath: testRuntimePath})
			if err != nil {
				t.Fatal(err)
			}
			m := mustTOML(t, out.Main)
			version, _ := ContainerdVersion(m)
			rt := append(CRIPluginPath(version), "containerd", "runtimes", "nvidia")
			opts, _ := lookup(m, append(rt, "options")...).(map[string]any)
			for k, v := range tt.want {
				if opts[k] != v {
					t.Errorf("options.%s = %v, want %v", k, opts[k], v)
				}
			}
			for k, v := range tt.keys {
				if got := lookup(m, append(rt, k)...); got != v {
					t.Errorf("%s = %v, want %v", k, got, v)
				}
			}
			// The source runtime is untouched.
			for _, src := range []string{"runc", "crun"} {
				bn := lookup(m, append(CRIPluginPath(version), "containerd", "runtimes", src, "options", "BinaryName")...)
				if bn == testRuntimePath {
					t.Errorf("runtime %s got our BinaryName", src)
				}
			}
		})
	}
	// A non-runc default runtime (kata) is copied too, type included, as
	// NVIDIA's nvidia-ctk does.
	in := []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"kata\"\n" +
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata]\nruntime_type = \"io.containerd.kata.v2\"\n" +
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata.options]\nConfigPath = \"/etc/kata.toml\"\n")
	out, err := EditContainerd(ContainerdInput{Main: in}, Options{RuntimePath: testRuntimePath})
	if err != nil {
		t.Fatal(err)
	}
	nv := []string{"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "nvidia"}
	if got := lookup(mustTOML(t, out.Main), append(nv, "options", "ConfigPath")...); got != "/etc/kata.toml" {
		t.Errorf("kata options not copied: ConfigPath = %v", got)
	}
	if got := lookup(mustTOML(t, out.Main), append(nv, "runtime_type")...); got != "io.containerd.kata.v2" {
		t.Errorf("runtime_type = %v, want the base's io.containerd.kata.v2", got)
	}
}

func TestEditContainerdImports(t *testing.T) {
	const dropIn = "/etc/containerd/conf.d/99-nvidia.toml"
	tests := []struct {
		name, main string
		wantAdded  bool
	}{
		{"none", "version = 2\n", true},
		{"other import", "version = 2\nimports = [\"/etc/containerd/x.toml\"]\n", true},
		{"exact", "version = 2\nimports = [\"" + dropIn + "\"]\n", true},
		{"glob", "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", false},
		{"relative", "version = 2\nimports = [\"conf.d/99-nvidia.toml\"]\n", true},
		{"narrower glob", "version = 2\nimports = [\"/etc/containerd/conf.d/9*.toml\"]\n", false},
		{"relative glob", "version = 2\nimports = [\"conf.d/*.toml\"]\n", false},
		{"comment header", "# hello\n\n# world\nversion = 2\n[plugins]\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := EditContainerd(ContainerdInput{Main: []byte(tt.main), MainPath: "/etc/containerd/config.toml", DropInPath: dropIn},
				Options{RuntimePath: testRuntimePath})
			if err != nil {
				t.Fatal(err)
			}
			if added := !bytes.Equal(out.Main, []byte(tt.main)); added != tt.wantAdded {
				t.Errorf("main changed = %v, want %v:\n%s", added, tt.wantAdded, out.Main)
			}
			if tt.wantAdded && strings.HasPrefix(tt.main, "#") && !strings.HasPrefix(string(out.Main), "# hello\n\n# world\nimports = ") {
				t.Errorf("imports not inserted after the leading comments:\n%s", out.Main)
			}
		})
	}
}

func TestEditContainerdSource(t *testing.T) {
	// The effective config (as `containerd config dump` prints it) supplies
	// the CRI table that a drop-in copies.
	src := []byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"from-dump\"\n" +
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n" +
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\nSystemdCgroup = true\n")
	out, err := EditContainerd(ContainerdInput{Main: nil, MainPath: "/etc/containerd/config.toml",
		DropInPath: "/etc/containerd/conf.d/99-nvidia.toml", Source: src}, Options{RuntimePath: testRuntimePath})
	if err != nil {
		t.Fatal(err)
	}
	d := mustTOML(t, out.DropIn)
	cri := []string{"plugins", "io.containerd.grpc.v1.cri"}
	if got := lookup(d, append(cri, "sandbox_image")...); got != "from-dump" {
		t.Errorf("sandbox_image = %v", got)
	}
	if got := lookup(d, append(cri, "containerd", "runtimes", "nvidia", "options", "SystemdCgroup")...); got != true {
		t.Errorf("SystemdCgroup = %v", got)
	}
	m := mustTOML(t, out.Main)
	if m["version"] != int64(2) {
		t.Errorf("new main file has version %v:\n%s", m["version"], out.Main)
	}
}

func TestEditContainerdErrors(t *testing.T) {
	tests := []struct {
		name, main, dropIn, want string
	}{
		{"bad toml", "version = \n", "", "/etc/containerd/config.toml: parsing TOML at line 1"},
		{"version string", "version = \"2\"\n", "", "version is a string"},
		{"version 4", "version = 4\n", "", "unsupported config version 4"},
		{"plugins scalar", "version = 2\nplugins = 3\n", "", "plugins is a integer"},
		{"cri scalar", "version = 2\n[plugins]\n\"io.containerd.grpc.v1.cri\" = \"x\"\n", "", `plugins."io.containerd.grpc.v1.cri" is a string`},
		{"runtimes scalar", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\nruntimes = 1\n", "", "containerd.runtimes is a integer"},
		{"base options scalar", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\noptions = 1\n", "", "runtimes.nvidia: options is a integer"},
		{"imports scalar", "version = 2\nimports = \"x\"\n", "", "imports is a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ContainerdInput{Main: []byte(tt.main), MainPath: "/etc/containerd/config.toml", DropIn: []byte(tt.dropIn)}
			if tt.dropIn != "" || strings.Contains(tt.name, "imports") {
				in.DropInPath = "/etc/containerd/conf.d/99-nvidia.toml"
			}
			_, err := EditContainerd(in, Options{RuntimePath: testRuntimePath})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if _, err := EditContainerd(ContainerdInput{}, Options{RuntimePath: "nvidia-container-runtime"}); err == nil || !strings.Contains(err.Error(), "must be absolute") {
		t.Errorf("relative runtime path: error = %v", err)
	}
}

func FuzzEditContainerd(f *testing.F) {
	for name, s := range containerdSamples(f) {
		f.Add(s, []byte(nil), strings.Contains(name, "v2"))
	}
	f.Add([]byte("version = 3\n"), []byte("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n"), true)
	f.Add([]byte("a = 1\n[plugins.cri]\n"), []byte(nil), false)
	f.Fuzz(func(t *testing.T, main, dropIn []byte, useDropIn bool) {
		in := ContainerdInput{Main: main, MainPath: "/etc/containerd/config.toml"}
		if useDropIn {
			in.DropIn, in.DropInPath = dropIn, "/etc/containerd/conf.d/99-nvidia.toml"
		}
		o := Options{RuntimePath: testRuntimePath, SetAsDefault: true, EnableCDI: true}
		out, err := EditContainerd(in, o)
		if err != nil {
			return
		}
		if _, err := parseTOML(out.Main); err != nil {
			t.Fatalf("main output does not parse: %v\n%s", err, out.Main)
		}
		in2 := in
		in2.Main, in2.DropIn = out.Main, out.DropIn
		out2, err := EditContainerd(in2, o)
		if err != nil {
			t.Fatalf("output does not edit again: %v", err)
		}
		if !bytes.Equal(out2.Main, out.Main) || !bytes.Equal(out2.DropIn, out.DropIn) {
			t.Fatalf("not idempotent")
		}
	})
}

func BenchmarkEditContainerdDefault(b *testing.B) {
	samples := containerdSamples(b)
	sample, ok := samples["containerd config default"]
	if !ok {
		sample = samples["containerd-v2.toml"]
	}
	o := Options{RuntimePath: testRuntimePath, SetAsDefault: true, EnableCDI: true}
	for b.Loop() {
		if _, err := EditContainerd(ContainerdInput{Main: sample, DropInPath: "/etc/containerd/conf.d/99-nvidia.toml"}, o); err != nil {
			b.Fatal(err)
		}
	}
}
