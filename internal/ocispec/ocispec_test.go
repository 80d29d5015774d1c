package ocispec

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/ocistate"
	"github.com/nctk/nctk/internal/plan"
)

const hookPath = "/usr/local/bin/nvidia-cdi-hook"

func testPlan() *plan.Plan {
	ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	return &plan.Plan{
		Devices: []plan.Device{
			{Path: "/dev/nvidiactl", HostPath: "/dev/nvidiactl", Major: 195, Minor: 255, FileMode: 0o666},
			{Path: "/dev/nvidia1", HostPath: "/dev/nvidia1", Major: 195, Minor: 1, FileMode: 0o666, GID: 44},
		},
		Mounts: []plan.Mount{
			{Source: "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1", Destination: "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1", Kind: plan.KindFile, Options: ro},
			{Source: "/usr/bin/nvidia-smi", Destination: "/usr/bin/nvidia-smi", Kind: plan.KindFile, Options: ro},
			{Source: "/run/nvidia-persistenced/socket", Destination: "/run/nvidia-persistenced/socket", Kind: plan.KindSocket,
				Options: []string{"nosuid", "nodev", "noexec", "rbind", "rprivate"}},
		},
		Symlinks: []plan.Symlink{
			{Link: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Target: "libcuda.so.535.1"},
			{Link: "/usr/lib/x86_64-linux-gnu/libcuda.so", Target: "libcuda.so.1"},
		},
		LdconfigDirs: []string{"/usr/lib/x86_64-linux-gnu"},
		Proc: &plan.ProcView{HostDir: "/proc/driver/nvidia", Files: []string{"params", "version", "registry"},
			GPUDirs: []string{"0000:3b:00.0"}, Expose: []string{"capabilities/mig/config"}},
		Env: []string{"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"},
	}
}

func loadTestdata(t *testing.T, name string) (*Doc, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := Parse(name, data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return doc, data
}

// generic decodes JSON into the generic tree used by the tests.
func generic(t *testing.T, data []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

func at(t *testing.T, v any, keys ...any) any {
	t.Helper()
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: not an object: %v", keys, v)
			}
			v, ok = m[k]
			if !ok {
				t.Fatalf("at %v: key %q missing", keys, k)
			}
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("at %v: not an array of > %d: %v", keys, k, v)
			}
			v = a[k]
		}
	}
	return v
}

func TestApplyKeepsUnknownFields(t *testing.T) {
	doc, orig := loadTestdata(t, "docker-gpus.json")
	if err := Apply(doc, testPlan(), HookConfig{Path: hookPath}); err != nil {
		t.Fatal(err)
	}
	out, err := doc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	before, after := generic(t, orig), generic(t, out)

	// Every unknown field, at every level Apply touches, is kept as it was.
	keep := [][]any{
		{"x-vendor-root"},
		{"process", "x-process-future"},
		{"process", "user", "x-user-extra"},
		{"process", "apparmorProfile"},
		{"root", "x-root-extra"},
		{"mounts", 1, "x-mount-extra"},
		{"hooks", "x-future-stage"},
		{"hooks", "createRuntime"},
		{"annotations"},
		{"linux", "resources", "x-resources-extra"},
		{"linux", "resources", "memory"},
		{"linux", "devices", 0, "x-dev-extra"},
		{"linux", "intelRdt", "xyz"},
		{"linux", "x-linux-future"},
		{"linux", "maskedPaths"},
		{"linux", "namespaces"},
	}
	for _, k := range keep {
		if b, a := at(t, before, k...), at(t, after, k...); !reflect.DeepEqual(a, b) {
			t.Errorf("%v changed: %v -> %v", k, b, a)
		}
	}
	// Numbers keep their literal (no float64 round trip).
	if got := string(out); !strings.Contains(got, "12345678901234567890123") || !strings.Contains(got, "2.50") {
		t.Errorf("number literals lost: %s", got)
	}
	// The other prestart hook stays with its unknown field; NVIDIA's goes.
	pre := at(t, after, "hooks", "prestart").([]any)
	if len(pre) != 1 || at(t, pre[0], "x-hook-extra") != "kept" {
		t.Errorf("prestart = %v, want only other-hook", pre)
	}
	// The typed view reflects the edit.
	s := doc.Spec()
	if s.Linux == nil || len(s.Linux.Devices) != 3 || len(s.Mounts) != 6 || len(s.Hooks.CreateContainer) != 1 {
		t.Errorf("typed view not updated: %+v", s)
	}
}

func TestApplyContent(t *testing.T) {
	doc, _ := loadTestdata(t, "docker-gpus.json")
	p := testPlan()
	if err := Apply(doc, p, HookConfig{Path: hookPath, LdconfigPath: "/sbin/ldconfig.real", InProcessLdcache: true}); err != nil {
		t.Fatal(err)
	}
	s := doc.Spec()

	// linux.devices: the existing one, then ours.
	var paths []string
	for _, d := range s.Linux.Devices {
		paths = append(paths, d.Path)
	}
	if want := []string{"/dev/fuse", "/dev/nvidiactl", "/dev/nvidia1"}; !slices.Equal(paths, want) {
		t.Errorf("devices %v, want %v", paths, want)
	}
	d := s.Linux.Devices[2]
	if d.Type != "c" || d.Major != 195 || d.Minor != 1 || d.FileMode == nil || *d.FileMode != 0o666 ||
		d.UID == nil || *d.UID != 0 || d.GID == nil || *d.GID != 44 {
		t.Errorf("device entry %+v", d)
	}

	// Cgroup rules: exactly one rw allow rule per plan device, after the
	// engine's rules.
	rules := s.Linux.Resources.Devices
	if len(rules) != 4 {
		t.Fatalf("cgroup rules %+v", rules)
	}
	for i, dev := range p.Devices {
		r := rules[2+i]
		if !r.Allow || r.Type != "c" || r.Major == nil || *r.Major != int64(dev.Major) ||
			r.Minor == nil || *r.Minor != int64(dev.Minor) || r.Access != "rw" {
			t.Errorf("rule %d = %+v", i, r)
		}
	}

	// Mounts: bind, plan options.
	ms := s.Mounts[3:]
	for i, m := range p.Mounts {
		if ms[i].Destination != m.Destination || ms[i].Source != m.Source || ms[i].Type != "bind" ||
			!slices.Equal(ms[i].Options, m.Options) {
			t.Errorf("mount %d = %+v, want %+v", i, ms[i], m)
		}
	}
	if slices.Contains(ms[2].Options, "ro") {
		t.Errorf("socket mount is read-only: %v", ms[2].Options)
	}

	// Env: replaced key, appended key, others untouched.
	env := s.Process.Env
	if n := countKey(env, "NVIDIA_VISIBLE_DEVICES"); n != 1 || !slices.Contains(env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("env %v", env)
	}
	if !slices.Contains(env, "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu") || !slices.Contains(env, "HOSTNAME=abc") {
		t.Errorf("env %v", env)
	}

	// Hooks: explicit minimal env, nothing from the image.
	cc := s.Hooks.CreateContainer
	// One process for the three hooks: chained with ";".
	wantArgs := [][]string{
		{"nvidia-cdi-hook", "create-symlinks",
			"--link", "libcuda.so.535.1::/usr/lib/x86_64-linux-gnu/libcuda.so.1",
			"--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
			";", "update-ldcache", "--ldconfig-path", "/sbin/ldconfig.real", "--folder", "/usr/lib/x86_64-linux-gnu",
			"--lib", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1",
			"--lib", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "--lib", "/usr/lib/x86_64-linux-gnu/libcuda.so",
			";", "mount-proc-driver", "--host-dir", "/proc/driver/nvidia",
			"--file", "params", "--file", "version", "--file", "registry",
			"--gpu", "0000:3b:00.0", "--expose", "capabilities/mig/config"},
	}
	if len(cc) != len(wantArgs) {
		t.Fatalf("createContainer hooks %+v", cc)
	}
	for i, h := range cc {
		if h.Path != hookPath || !slices.Equal(h.Args, wantArgs[i]) {
			t.Errorf("hook %d = %+v, want args %v", i, h, wantArgs[i])
		}
		if !slices.Equal(h.Env, hookargs.Env()) {
			t.Errorf("hook %d env %v, want %v", i, h.Env, hookargs.Env())
		}
		for _, kv := range h.Env {
			if strings.HasPrefix(kv, "LD_PRELOAD") || strings.HasPrefix(kv, "HOSTNAME") {
				t.Errorf("hook %d inherits image env %q", i, kv)
			}
		}
	}
	if want := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_DEBUG=false", "GOMAXPROCS=1"}; !slices.Equal(hookargs.Env(), want) {
		t.Errorf("HookEnv = %v", hookargs.Env())
	}
}

func countKey(env []string, key string) int {
	n := 0
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			n++
		}
	}
	return n
}

func TestApplyIdempotent(t *testing.T) {
	for _, name := range []string{"docker-gpus.json", "minimal.json"} {
		t.Run(name, func(t *testing.T) {
			doc, _ := loadTestdata(t, name)
			hc := HookConfig{Path: hookPath}
			if err := Apply(doc, testPlan(), hc); err != nil {
				t.Fatal(err)
			}
			once, _ := doc.Bytes()
			if err := Apply(doc, testPlan(), hc); err != nil {
				t.Fatal(err)
			}
			twice, _ := doc.Bytes()
			if !bytes.Equal(once, twice) {
				t.Errorf("second Apply changed the doc:\n%s\n%s", once, twice)
			}
			// Through a file: save, load, apply again.
			path := filepath.Join(t.TempDir(), "config.json")
			if err := Save(path, doc); err != nil {
				t.Fatal(err)
			}
			doc2, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(doc2, testPlan(), hc); err != nil {
				t.Fatal(err)
			}
			thrice, _ := doc2.Bytes()
			if !bytes.Equal(once, thrice) {
				t.Errorf("Apply after reload changed the doc:\n%s\n%s", once, thrice)
			}
		})
	}
}

func TestApplyKeepsForeignHooks(t *testing.T) {
	// A CDI-spec hook (same binary, other env) and an unrelated hook stay.
	data := []byte(`{"ociVersion":"1.2.0","process":{"cwd":"/","args":["sh"]},"root":{"path":"rootfs"},
	"hooks":{"createContainer":[
	  {"path":"/usr/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","create-symlinks","--link","a::/b"],"env":["NVIDIA_CTK_DEBUG=false"]},
	  {"path":"/usr/bin/x","args":["x"]}]}}`)
	doc, err := Parse("cfg", data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(doc, testPlan(), HookConfig{Path: hookPath}); err != nil {
		t.Fatal(err)
	}
	cc := doc.Spec().Hooks.CreateContainer
	if len(cc) != 3 || cc[0].Path != "/usr/bin/nvidia-cdi-hook" || cc[1].Path != "/usr/bin/x" {
		t.Errorf("hooks %+v", cc)
	}
}

func TestApplyMinimalSpec(t *testing.T) {
	doc, _ := loadTestdata(t, "minimal.json")
	p := &plan.Plan{Devices: []plan.Device{{Path: "/dev/nvidia0", Major: 195}}}
	if err := Apply(doc, p, HookConfig{}); err != nil {
		t.Fatal(err)
	}
	s := doc.Spec()
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].FileMode != nil || len(s.Linux.Resources.Devices) != 1 {
		t.Errorf("linux = %+v", s.Linux)
	}
	if s.Hooks != nil {
		t.Errorf("hooks added for a plan without hook work: %+v", s.Hooks)
	}
}

func TestApplyNilPlan(t *testing.T) {
	doc, _ := loadTestdata(t, "docker-gpus.json")
	before, _ := doc.Bytes()
	if err := Apply(doc, nil, HookConfig{}); err != nil {
		t.Fatal(err)
	}
	after, _ := doc.Bytes()
	if !bytes.Equal(before, after) {
		t.Error("nil plan changed the doc")
	}
}

func TestApplyErrorsLeaveDocUnchanged(t *testing.T) {
	tests := []struct {
		name string
		data string
		edit func(p *plan.Plan)
		hc   HookConfig
		want string
	}{
		{"relative mount source", "", func(p *plan.Plan) { p.Mounts[0].Source = "lib/x" }, HookConfig{Path: hookPath}, "mount source"},
		{"dotdot destination", "", func(p *plan.Plan) { p.Mounts[0].Destination = "/usr/../etc/x" }, HookConfig{Path: hookPath}, "\"..\" component"},
		{"relative device", "", func(p *plan.Plan) { p.Devices[0].Path = "dev/x" }, HookConfig{Path: hookPath}, "device path"},
		{"bad env", "", func(p *plan.Plan) { p.Env = []string{"=x"} }, HookConfig{Path: hookPath}, "KEY=VALUE"},
		{"symlink separator", "", func(p *plan.Plan) { p.Symlinks[0].Target = "a::b" }, HookConfig{Path: hookPath}, "::"},
		{"symlink target ending in a colon", "", func(p *plan.Plan) { p.Symlinks[0].Target = "a:" }, HookConfig{Path: hookPath}, "::"},
		{"proc escape", "", func(p *plan.Plan) { p.Proc.GPUDirs = []string{"../../etc"} }, HookConfig{Path: hookPath}, "component"},
		{"no hook path", "", func(p *plan.Plan) {}, HookConfig{}, "hook binary"},
		{"no process", `{"ociVersion":"1.2.0","root":{"path":"r"}}`, func(p *plan.Plan) {}, HookConfig{Path: hookPath}, "no process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc *Doc
			if tt.data != "" {
				var err error
				if doc, err = Parse("cfg.json", []byte(tt.data)); err != nil {
					t.Fatal(err)
				}
			} else {
				doc, _ = loadTestdata(t, "docker-gpus.json")
			}
			before, _ := doc.Bytes()
			p := testPlan()
			tt.edit(p)
			err := Apply(doc, p, tt.hc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			after, _ := doc.Bytes()
			if !bytes.Equal(before, after) {
				t.Error("failed Apply changed the doc")
			}
		})
	}
}

// TestParseLeavesOtherFieldsToRuntime: the type of a field nctk neither
// reads nor edits is the low-level runtime's to check; Parse accepts it
// and Apply and Bytes keep it exactly.
func TestParseLeavesOtherFieldsToRuntime(t *testing.T) {
	doc, err := Parse("cfg.json", []byte(`{"ociVersion":"1.2.0","root":{"path":"r"},"process":{"env":["A=B"],"user":{"uid":-1}},"linux":{"sysctl":7}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(doc, testPlan(), HookConfig{Path: hookPath}); err != nil {
		t.Fatal(err)
	}
	out, err := doc.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"user":{"uid":-1}`, `"sysctl":7`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("Apply lost %s:\n%s", want, out)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
	}{
		{"syntax", "{\n  \"ociVersion\": \"1.0\",\n  \"process\": {,}\n}", []string{"cfg.json", "line 3, column 15", "byte offset"}},
		{"truncated", `{"ociVersion": "1.0", "process": {`, []string{"cfg.json", "unexpected end"}},
		{"empty", ``, []string{"cfg.json", "empty"}},
		{"not object", `[1,2]`, []string{"cfg.json", "want a JSON object"}},
		{"trailing data", `{"ociVersion":"1"} {}`, []string{"cfg.json", "after the top-level value"}},
		{"wrong type", `{"ociVersion":"1","process":{"env":"A=B"}}`, []string{"cfg.json", "field process.env", "string", "byte offset"}},
		{"wrong nested type", `{"ociVersion":"1","linux":{"resources":{"devices":[{"major":"x"}]}}}`, []string{"linux.resources.devices.major"}},
		{"capabilities not a list", `{"ociVersion":"1","process":{"capabilities":{"bounding":"CAP_SYS_ADMIN"}}}`, []string{"process.capabilities.bounding"}},
		{"mount destination", `{"ociVersion":"1","mounts":[{"destination":1}]}`, []string{"mounts.destination"}},
		{"annotation value", `{"ociVersion":"1","annotations":{"a":1}}`, []string{"annotations"}},
		{"root path", `{"ociVersion":"1","root":{"path":["r"]}}`, []string{"root.path"}},
		{"hook args", `{"ociVersion":"1","hooks":{"prestart":[{"path":"/h","args":"x"}]}}`, []string{"hooks.prestart.args"}},
		{"device major", `{"ociVersion":"1","linux":{"devices":[{"path":"/dev/x","type":"c","major":"1"}]}}`, []string{"linux.devices.major"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("cfg.json", []byte(tt.data))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "config.json"))
	if err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("err = %v", err)
	}
}

func TestSaveKeepsModeAndIsAtomic(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o644, 0o640} {
		dir := t.TempDir()
		path := filepath.Join(dir, "config.json")
		data, _ := os.ReadFile("testdata/minimal.json")
		if err := os.WriteFile(path, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		doc, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := Apply(doc, testPlan(), HookConfig{Path: hookPath}); err != nil {
			t.Fatal(err)
		}
		if err := Save(path, doc); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("mode %v, want %v", st.Mode().Perm(), mode)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("temporary files left: %v", entries)
		}
		back, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(back.Spec().Linux.Devices) != 2 {
			t.Errorf("saved content lacks the edit")
		}
	}
}

func TestSaveFailureLeavesTargetAlone(t *testing.T) {
	doc, _ := loadTestdata(t, "minimal.json")
	dir := t.TempDir()
	// The target is a non-empty directory: the rename fails.
	target := filepath.Join(dir, "config.json")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Save(target, doc); err == nil {
		t.Fatal("Save over a directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	// A missing directory.
	if err := Save(filepath.Join(dir, "nope", "config.json"), doc); err == nil {
		t.Error("Save into a missing directory succeeded")
	}
}

func TestMalformedFileUntouched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	bad := []byte(`{"ociVersion": "1.2.0", "process": {"env": ["A=B",]}}`)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "column") {
		t.Fatalf("err = %v", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(after, bad) {
		t.Error("malformed file modified")
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"docker-gpus.json", "minimal.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"process":null,"linux":null,"hooks":null,"mounts":null}`))
	f.Add([]byte(`{"process":{"env":null},"linux":{"resources":null,"devices":null},"hooks":{"prestart":null}}`))
	f.Add([]byte(`{"a":1e400}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse("fuzz.json", data)
		if err != nil {
			return
		}
		out, err := doc.Bytes()
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		again, err := Parse("fuzz.json", out)
		if err != nil {
			t.Fatalf("re-parse of encoded doc: %v\n%s", err, out)
		}
		if !equalJSON(doc.tree, again.tree) {
			t.Fatalf("round trip changed the doc")
		}
		err = Apply(doc, testPlan(), HookConfig{Path: hookPath})
		if err != nil {
			return
		}
		once, _ := doc.Bytes()
		if err := Apply(doc, testPlan(), HookConfig{Path: hookPath}); err != nil {
			t.Fatalf("second Apply: %v", err)
		}
		twice, _ := doc.Bytes()
		if !bytes.Equal(once, twice) {
			t.Fatalf("Apply not idempotent")
		}
	})
}

func BenchmarkLoadApplySave(b *testing.B) {
	data, err := os.ReadFile("testdata/docker-gpus.json")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "config.json")
	for b.Loop() {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		doc, err := Load(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := Apply(doc, testPlan(), HookConfig{Path: hookPath}); err != nil {
			b.Fatal(err)
		}
		if err := Save(path, doc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestChain(t *testing.T) {
	env := hookargs.Env()
	h := func(path string, env []string, args ...string) Hook { return Hook{Path: path, Args: args, Env: env} }
	tests := []struct {
		name string
		in   []Hook
		want [][]string
	}{
		{"none", nil, nil},
		{"one", []Hook{h("/x", env, "nvidia-cdi-hook", "a", "--f")}, [][]string{{"nvidia-cdi-hook", "a", "--f"}}},
		{"same binary and env merge", []Hook{h("/x", env, "nvidia-cdi-hook", "a"), h("/x", env, "nvidia-cdi-hook", "b", "--y")},
			[][]string{{"nvidia-cdi-hook", "a", ";", "b", "--y"}}},
		{"other env stays apart", []Hook{h("/x", env, "nvidia-cdi-hook", "a"), h("/x", nil, "nvidia-cdi-hook", "b")},
			[][]string{{"nvidia-cdi-hook", "a"}, {"nvidia-cdi-hook", "b"}}},
		{"other path stays apart", []Hook{h("/x", env, "nvidia-cdi-hook", "a"), h("/y", env, "nvidia-cdi-hook", "b")},
			[][]string{{"nvidia-cdi-hook", "a"}, {"nvidia-cdi-hook", "b"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.in)
			got := Chain(in)
			if len(got) != len(tc.want) {
				t.Fatalf("Chain = %+v, want %v", got, tc.want)
			}
			for i := range got {
				if !slices.Equal(got[i].Args, tc.want[i]) {
					t.Errorf("hook %d args %q, want %q", i, got[i].Args, tc.want[i])
				}
			}
			for i := range tc.in {
				if len(in[i].Args) != len(tc.in[i].Args) {
					t.Errorf("input hook %d modified", i)
				}
			}
		})
	}
}

// TestHooksLdcacheLibs: without InProcessLdcache update-ldcache gets
// NVIDIA's arguments only; with it, the library files mounted into the
// ldconfig directories and the links there, each once (binaries and links
// elsewhere are not libraries to record).
func TestHooksLdcacheLibs(t *testing.T) {
	p := testPlan()
	p.Symlinks = append(p.Symlinks, plan.Symlink{Link: "/usr/bin/nvidia-smi-link", Target: "nvidia-smi"})
	for _, tc := range []struct {
		inProcess bool
		want      []string
	}{
		{false, []string{"update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}},
		{true, []string{"update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu",
			"--lib", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1",
			"--lib", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "--lib", "/usr/lib/x86_64-linux-gnu/libcuda.so"}},
	} {
		hs := Hooks(p, HookConfig{Path: hookPath, InProcessLdcache: tc.inProcess})
		i := slices.IndexFunc(hs, func(h Hook) bool { return len(h.Args) > 1 && h.Args[1] == hookargs.NameUpdateLdcache })
		if i < 0 || !slices.Equal(hs[i].Args[1:], tc.want) {
			t.Errorf("InProcessLdcache=%v: hooks %+v, want update-ldcache args %q", tc.inProcess, hs, tc.want)
		}
	}
}

// TestHooksRootfsDoneNoProcView: with RootfsDone no create-symlinks or
// update-ldcache hook is emitted; with NoProcView no mount-proc-driver; with
// both, Apply leaves no createContainer hook (and removes the ones an
// earlier Apply emitted), keeping foreign hooks.
func TestHooksRootfsDoneNoProcView(t *testing.T) {
	for _, tc := range []struct {
		rootfsDone, noProc bool
		want               []string
	}{
		{false, false, []string{hookargs.NameCreateSymlinks, hookargs.NameUpdateLdcache, hookargs.NameMountProcDriver}},
		{true, false, []string{hookargs.NameMountProcDriver}},
		{false, true, []string{hookargs.NameCreateSymlinks, hookargs.NameUpdateLdcache}},
		{true, true, nil},
	} {
		var got []string
		for _, h := range Hooks(testPlan(), HookConfig{Path: hookPath, InProcessLdcache: true, RootfsDone: tc.rootfsDone, NoProcView: tc.noProc}) {
			got = append(got, h.Args[1])
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("RootfsDone=%v NoProcView=%v: hooks %q, want %q", tc.rootfsDone, tc.noProc, got, tc.want)
		}
	}

	doc, _ := loadTestdata(t, "minimal.json")
	if err := Apply(doc, testPlan(), HookConfig{Path: hookPath}); err != nil {
		t.Fatal(err)
	}
	hc := HookConfig{Path: hookPath, RootfsDone: true, NoProcView: true}
	if err := Apply(doc, testPlan(), hc); err != nil {
		t.Fatal(err)
	}
	if h := doc.Spec().Hooks; h != nil && len(h.CreateContainer) != 0 {
		t.Errorf("createContainer hooks left: %+v", h.CreateContainer)
	}
	once, _ := doc.Bytes()
	if err := Apply(doc, testPlan(), hc); err != nil {
		t.Fatal(err)
	}
	if twice, _ := doc.Bytes(); !bytes.Equal(once, twice) {
		t.Errorf("second Apply changed the doc:\n%s\n%s", once, twice)
	}
}

func TestRootPath(t *testing.T) {
	for _, tt := range []struct{ name, spec, bundle, want, err string }{
		{"relative", `{"root":{"path":"rootfs"}}`, "/b", "/b/rootfs", ""},
		{"absolute", `{"root":{"path":"/x/./y/"}}`, "/b", "/x/y", ""},
		{"dot-dot", `{"root":{"path":"../r"}}`, "/b/c", "/b/r", ""},
		{"unset", `{"root":{}}`, "/b", "", "cfg.json: root.path is not set"},
		{"no root", `{}`, "/b", "", "root.path is not set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse("cfg.json", []byte(tt.spec))
			if err != nil {
				t.Fatal(err)
			}
			got, err := doc.RootPath(tt.bundle)
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("RootPath(%q) = %q, %v; want %q, %q", tt.bundle, got, err, tt.want, tt.err)
			}
			// The hooks' ocistate.LoadRootPath, which reads root.path
			// alone, agrees.
			file := filepath.Join(t.TempDir(), "cfg.json")
			if err := os.WriteFile(file, []byte(tt.spec), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err = ocistate.LoadRootPath(file, tt.bundle)
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), "root.path is not set")) {
				t.Errorf("LoadRootPath(%q) = %q, %v; want %q, %q", tt.bundle, got, err, tt.want, tt.err)
			}
		})
	}
}

// TestHooksDevSymlinks: links below /dev are made by a create-symlinks hook
// even when the caller made the other links in the rootfs (RootfsDone),
// since the container's /dev exists only after the low-level runtime set
// it up.
func TestHooksDevSymlinks(t *testing.T) {
	p := &plan.Plan{
		Symlinks:    []plan.Symlink{{Link: "/usr/lib/libcuda.so", Target: "libcuda.so.1"}},
		DevSymlinks: []plan.Symlink{{Link: "/dev/dri/by-path/pci-0000:18:00.0-card", Target: "../card1"}},
	}
	for _, done := range []bool{false, true} {
		hs := Hooks(p, HookConfig{Path: "/usr/bin/nvidia-cdi-hook", RootfsDone: done})
		var got []string
		for _, h := range hs {
			got = append(got, strings.Join(h.Args, " "))
		}
		want := []string{"nvidia-cdi-hook create-symlinks --link ../card1::/dev/dri/by-path/pci-0000:18:00.0-card"}
		if !done {
			want = append([]string{"nvidia-cdi-hook create-symlinks --link libcuda.so.1::/usr/lib/libcuda.so"}, want...)
		}
		if !slices.Equal(got, want) {
			t.Errorf("RootfsDone %v: hooks %q, want %q", done, got, want)
		}
	}
	if len(Hooks(&plan.Plan{}, HookConfig{Path: "/x"})) != 0 {
		t.Error("an empty plan has hooks")
	}
}

// TestDevices: Doc.Devices gives linux.devices as Spec does, before an
// Apply and after one (converted from the tree alone), and nil without.
func TestDevices(t *testing.T) {
	doc, _ := loadTestdata(t, "docker-gpus.json")
	if got, want := doc.Devices(), doc.Spec().Linux.Devices; !reflect.DeepEqual(got, want) || len(got) != 1 {
		t.Fatalf("before Apply: %+v, want %+v", got, want)
	}
	if err := Apply(doc, testPlan(), HookConfig{Path: hookPath, InProcessLdcache: true}); err != nil {
		t.Fatal(err)
	}
	got := doc.Devices()
	if want := doc.Spec().Linux.Devices; !reflect.DeepEqual(got, want) || len(got) != 3 {
		t.Fatalf("after Apply: %+v, want %+v", got, want)
	}
	bare, err := Parse("bare", []byte(`{"ociVersion":"1.0.2","root":{"path":"rootfs"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := bare.Devices(); d != nil {
		t.Errorf("no linux: %+v", d)
	}
}
