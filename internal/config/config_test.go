package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/hostfile"
)

func TestDefaultFor(t *testing.T) {
	root := t.TempDir()
	c := DefaultFor(root)
	if c.CLI.Ldconfig != "@/sbin/ldconfig" || c.CLI.User != "" {
		t.Errorf("plain root: ldconfig %q user %q", c.CLI.Ldconfig, c.CLI.User)
	}
	if !c.AcceptEnvvarUnprivileged || c.AcceptDeviceListAsVolumeMounts || c.DisableRequire || !c.CLI.LoadKmods ||
		c.Runtime.Mode != "auto" || c.Runtime.LogLevel != "info" || c.Runtime.Debug != "/dev/null" ||
		!reflect.DeepEqual(c.Runtime.Runtimes, []string{"runc", "crun"}) ||
		c.Runtime.Modes.CDI.DefaultKind != "nvidia.com/gpu" || c.Runtime.Modes.Legacy.CUDACompatMode != "ldconfig" ||
		c.Hook.Path != "nvidia-container-runtime-hook" || c.CTK.Path != "nvidia-ctk" {
		t.Errorf("defaults = %+v", c)
	}
	s, err := c.SupportedCapabilities()
	if err != nil || !reflect.DeepEqual(s, caps.Full()) {
		t.Errorf("SupportedCapabilities = %v, %v", s, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}

	os.MkdirAll(filepath.Join(root, "sbin"), 0o755)
	os.WriteFile(filepath.Join(root, "sbin/ldconfig.real"), nil, 0o755)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("NAME=\"openSUSE Leap\"\nID=\"opensuse-leap\"\nID_LIKE=\"suse opensuse\"\n"), 0o644)
	c = DefaultFor(root)
	if c.CLI.Ldconfig != "@/sbin/ldconfig.real" || c.CLI.User != "root:video" {
		t.Errorf("ubuntu/suse root: ldconfig %q user %q", c.CLI.Ldconfig, c.CLI.User)
	}
}

func TestPath(t *testing.T) {
	tests := []struct {
		env  []string
		want string
		must bool
	}{
		{nil, "/etc/nvidia-container-runtime/config.toml", false},
		{[]string{"XDG_CONFIG_HOME=/home/u/.config"}, "/home/u/.config/nvidia-container-runtime/config.toml", false},
		{[]string{"XDG_CONFIG_HOME=/x", "NVIDIA_CTK_CONFIG_FILE_PATH=/cfg.toml"}, "/cfg.toml", true},
		{[]string{"NVIDIA_CTK_CONFIG_FILE_PATH="}, "/etc/nvidia-container-runtime/config.toml", false},
		{[]string{"XDG_CONFIG_HOME=/a", "XDG_CONFIG_HOME=/b"}, "/b/nvidia-container-runtime/config.toml", false},
	}
	for _, tt := range tests {
		got, must := Path(tt.env)
		if got != tt.want || must != tt.must {
			t.Errorf("Path(%q) = %q, %v; want %q, %v", tt.env, got, must, tt.want, tt.must)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	// XDG set, file missing: defaults.
	c, err := Load([]string{"XDG_CONFIG_HOME=" + dir})
	if err != nil || c.Path != "" || !c.CLI.LoadKmods {
		t.Fatalf("missing file: %+v, %v", c, err)
	}
	// Explicit path must exist.
	_, err = Load([]string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + filepath.Join(dir, "nope.toml")})
	if err == nil || !strings.Contains(err.Error(), "NVIDIA_CTK_CONFIG_FILE_PATH=") || !strings.Contains(err.Error(), "nope.toml") {
		t.Errorf("explicit missing file: %v", err)
	}
	p := filepath.Join(dir, RelativePath)
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte("disable-require = true\n[nvidia-container-cli]\nroot = \"/run/nvidia/driver\"\nload-kmods = false\n"), 0o644)
	c, err = Load([]string{"XDG_CONFIG_HOME=" + dir})
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != p || !c.DisableRequire || c.CLI.Root != "/run/nvidia/driver" || c.CLI.LoadKmods {
		t.Errorf("loaded %+v", c)
	}
	// Unspecified keys keep their defaults.
	if c.Runtime.LogLevel != "info" || c.CLI.Ldconfig == "" || !c.AcceptEnvvarUnprivileged || len(c.Runtime.Runtimes) != 2 {
		t.Errorf("defaults lost: %+v", c)
	}
	// Unreadable: a directory.
	if _, err := LoadFile(dir, false); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("directory: %v", err)
	}
}

// TestLoadFileSpecial: a FIFO (which blocked the read), a link to /dev/zero
// (which grew without bound) or a huge file in place of config.toml is
// refused at once with an error naming it.
func TestLoadFileSpecial(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.toml")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{{fifo, hostfile.ErrNotRegular}, {zero, hostfile.ErrNotRegular}, {huge, hostfile.ErrTooLarge}} {
		done := make(chan error, 1)
		go func() { _, err := LoadFile(tc.path, true); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("LoadFile(%s) = %v, want %v naming the file", tc.path, err, tc.want)
			}
		case <-time.After(time.Second):
			t.Fatalf("LoadFile(%s) still blocked after 1s", tc.path)
		}
	}
}

const nvidiaDefaultFile = `#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "ldconfig"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
`

func TestParseNVIDIAFile(t *testing.T) {
	c, err := Parse([]byte(nvidiaDefaultFile), "config.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.CLI.Ldconfig = "@/sbin/ldconfig"
	want.Path = "config.toml"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("NVIDIA's default file:\n got %+v\nwant %+v", c, want)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %q", c.Warnings)
	}
}

func TestParseAllKeys(t *testing.T) {
	doc := `accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
disable-require = true
supported-driver-capabilities = "compute,utility"
swarm-resource = "DOCKER_RESOURCE_GPU, DOCKER_RESOURCE_NVIDIA"
[nvidia-container-cli]
root = "/run/nvidia/driver"
path = "/usr/bin/nvidia-container-cli"
environment = ["A=1", "B=2"]
debug = "/var/log/nvidia-container-toolkit.log"
ldcache = "/etc/ld.so.cache"
load-kmods = false
no-cgroups = true
user = "root:video"
ldconfig = "@/sbin/ldconfig.real"
no-pivot = true
[nvidia-container-runtime]
debug = "/var/log/nvidia-container-runtime.log"
log-level = "debug"
runtimes = ["crun"]
mode = "legacy"
[nvidia-container-runtime.modes.cdi]
spec-dirs = ["/etc/cdi"]
default-kind = "example.com/gpu"
annotation-prefixes = ["cdi.k8s.io/", "x/"]
[nvidia-container-runtime.modes.csv]
mount-spec-path = "/csv"
compat-container-root = "/compat"
[nvidia-container-runtime.modes.jit-cdi]
nvcdi-feature-flags = ["enable-explicit-driver-libraries"]
nvcdi-disable-hooks = ["chmod"]
[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "hook"
[nvidia-container-runtime-hook]
path = "/usr/bin/nvidia-container-runtime-hook"
skip-mode-detection = true
[nvidia-ctk]
path = "/usr/bin/nvidia-ctk"
[features]
allow-cuda-compat-libs-from-container = true
allow-ldconfig-from-container = true
allow-unknown-oci-spec-fields = true
disable-cuda-compat-lib-hook = true
disable-imex-channel-creation = true
ignore-imex-channel-requests = true
no-additional-gids-for-device-nodes = true
`
	c, err := Parse([]byte(doc), "all.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %q", c.Warnings)
	}
	// Every key was set to a non-default value: no field may equal its
	// default.
	def := Default()
	var check func(v, d reflect.Value, path string)
	check = func(v, d reflect.Value, path string) {
		for i := 0; i < v.NumField(); i++ {
			name, _ := tomlTag(v.Type().Field(i))
			if name == "" {
				continue
			}
			if v.Field(i).Kind() == reflect.Struct {
				check(v.Field(i), d.Field(i), path+name+".")
				continue
			}
			if reflect.DeepEqual(v.Field(i).Interface(), d.Field(i).Interface()) {
				t.Errorf("key %s%s kept its default %v", path, name, d.Field(i).Interface())
			}
		}
	}
	check(reflect.ValueOf(c).Elem(), reflect.ValueOf(def).Elem(), "")
	if got := c.SwarmResourceVars(); !reflect.DeepEqual(got, []string{"DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_NVIDIA"}) {
		t.Errorf("SwarmResourceVars = %q", got)
	}
	if c.CUDACompatMode() != "disabled" {
		t.Errorf("CUDACompatMode = %q", c.CUDACompatMode())
	}
	// Round trip.
	again, err := Parse(Render(c), "again")
	if err != nil {
		t.Fatalf("%v\n%s", err, Render(c))
	}
	again.Path = c.Path
	if !reflect.DeepEqual(again, c) {
		t.Errorf("round trip:\n got %+v\nwant %+v", again, c)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		doc, want string
	}{
		{"disable-require = \"yes\"\n", "config f.toml: line 1, column 19, key disable-require: wrong type: want a boolean (true or false)"},
		{"\n[nvidia-container-cli]\nroot = 3\n", "config f.toml: line 3, column 8, key nvidia-container-cli.root: wrong type: want a string"},
		{"[nvidia-container-runtime]\nruntimes = \"runc\"\n", "line 2, column 12, key nvidia-container-runtime.runtimes: wrong type: want an array of strings"},
		{"[nvidia-container-runtime]\nruntimes = [1]\n", "key nvidia-container-runtime.runtimes: wrong type"},
		{"nvidia-container-cli = 1\n", "key nvidia-container-cli: wrong type: want a table"},
		{"disable-require = \n", "config f.toml: line 1, column 19"},
		{"[a\n", "config f.toml: line 1"},
		{"[x]\n[x]\n", "line 2"},
		{"[nvidia-container-cli]\nldconfig = \"/sbin/ldconfig\"\n", `nvidia-container-cli.ldconfig = "/sbin/ldconfig" is a container path (no "@"), refused unless features.allow-ldconfig-from-container = true: write a host path starting with @`},
		{"supported-driver-capabilities = \"compute,gpu\"\n", `supported-driver-capabilities = "compute,gpu": unknown driver capability "gpu"`},
		{"[nvidia-container-runtime]\nlog-level = \"verbose\"\n", `log-level = "verbose": want one of`},
		{"[nvidia-container-runtime]\nmode = \"magic\"\n", `mode = "magic": want auto, legacy, cdi, jit-cdi or csv`},
		{"[nvidia-container-runtime]\nruntimes = []\n", "runtimes is empty"},
		{"[nvidia-container-cli]\nenvironment = [\"NOEQUALS\"]\n", `environment entry "NOEQUALS": want NAME=value`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.doc), "f.toml")
		if err == nil {
			t.Errorf("Parse(%q): no error, want %q", tt.doc, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "f.toml") {
			t.Errorf("Parse(%q) = %q, want %q", tt.doc, err, tt.want)
		}
	}
}

func TestValidateAllowsContainerLdconfigWithFeature(t *testing.T) {
	doc := "[nvidia-container-cli]\nldconfig = \"/sbin/ldconfig\"\n[features]\nallow-ldconfig-from-container = true\n"
	c, err := Parse([]byte(doc), "f")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], `nvidia-container-cli.ldconfig = "/sbin/ldconfig" is a container path: nctk runs the host's /sbin/ldconfig instead`) {
		t.Errorf("warnings = %q", c.Warnings)
	}
}

func TestUnknownKeys(t *testing.T) {
	doc := `future-key = 1
[nvidia-container-cli]
load-kmods = false
new-flag = "x"
[nvidia-container-runtime.modes.cdi]
spec-dirs = ["/a"]
[nvidia-container-runtime.modes.future]
opts = ["a", "b"]
[features]
some-future-feature = true
[brand-new]
nested = { a = 1, b = "two" }
[[brand-new.list]]
q = 1
`
	c, err := Parse([]byte(doc), "f.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.CLI.LoadKmods || !reflect.DeepEqual(c.Runtime.Modes.CDI.SpecDirs, []string{"/a"}) {
		t.Errorf("known keys not applied: %+v", c)
	}
	for _, w := range []string{"f.toml:1: unknown key future-key", "f.toml:4: unknown key nvidia-container-cli.new-flag", "unknown key features.some-future-feature", "nvidia-container-runtime.modes.future"} {
		if !strings.Contains(strings.Join(c.Warnings, "\n"), w) {
			t.Errorf("warnings %q lack %q", c.Warnings, w)
		}
	}
	out := string(Render(c))
	for _, want := range []string{"future-key = 1\n", "new-flag = \"x\"\n", "[nvidia-container-runtime.modes.future]\nopts = ['a', 'b']\n", "some-future-feature = true\n", "[brand-new]\nlist = [{q = 1}]\n", "[brand-new.nested]\na = 1\nb = \"two\"\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("Render lost %q:\n%s", want, out)
		}
	}
	again, err := Parse([]byte(out), "again")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(again.Unknown, c.Unknown) {
		t.Errorf("unknown keys after round trip:\n got %#v\nwant %#v", again.Unknown, c.Unknown)
	}
}

func TestRenderDefault(t *testing.T) {
	c := DefaultFor(t.TempDir())
	out := string(Render(c))
	if out != strings.Replace(nvidiaDefaultFile, "\n[nvidia-container-runtime.modes]\n", "", 1) {
		t.Errorf("Render(Default()) =\n%s", out)
	}
	back, err := Parse([]byte(out), "x")
	if err != nil {
		t.Fatal(err)
	}
	back.Path = ""
	want := Default()
	want.CLI.Ldconfig = c.CLI.Ldconfig
	want.CLI.User = c.CLI.User
	if !reflect.DeepEqual(back, want) {
		t.Errorf("round trip of defaults:\n got %+v\nwant %+v", back, want)
	}
	m, _ := Marshal(c)
	if strings.Contains(string(m), "#") || !strings.Contains(string(m), "root = \"\"\n") || !strings.Contains(string(m), `debug = "/dev/null"`) {
		t.Errorf("Marshal:\n%s", m)
	}
}

func TestSet(t *testing.T) {
	tests := []struct {
		key, value string
		get        func(*Config) any
		want       any
	}{
		{"disable-require", "true", func(c *Config) any { return c.DisableRequire }, true},
		{"nvidia-container-cli.load-kmods", "false", func(c *Config) any { return c.CLI.LoadKmods }, false},
		{"nvidia-container-cli.no-cgroups", "", func(c *Config) any { return c.CLI.NoCgroups }, true},
		{"nvidia-container-cli.root", "/run/nvidia/driver", func(c *Config) any { return c.CLI.Root }, "/run/nvidia/driver"},
		{"nvidia-container-runtime.runtimes", "crun, runc", func(c *Config) any { return c.Runtime.Runtimes }, []string{"crun", "runc"}},
		{"nvidia-container-runtime.runtimes", "runc:crun", func(c *Config) any { return c.Runtime.Runtimes }, []string{"runc", "crun"}},
		{"nvidia-container-cli.environment", "PATH=/a:/b,X=1", func(c *Config) any { return c.CLI.Environment }, []string{"PATH=/a:/b", "X=1"}},
		{"nvidia-container-runtime.modes.cdi.spec-dirs", "", func(c *Config) any { return c.Runtime.Modes.CDI.SpecDirs }, []string{}},
		{"nvidia-container-runtime.modes.legacy.cuda-compat-mode", "mount", func(c *Config) any { return c.Runtime.Modes.Legacy.CUDACompatMode }, "mount"},
		{"features.allow-ldconfig-from-container", "true", func(c *Config) any { return c.Features.AllowLdconfigFromContainer }, true},
		{"features.allow-ldconfig-from-container", "nil", func(c *Config) any { return c.Features.AllowLdconfigFromContainer }, false},
		{"nvidia-container-runtime-hook.skip-mode-detection", "1", func(c *Config) any { return c.Hook.SkipModeDetection }, true},
	}
	for _, tt := range tests {
		c := Default()
		if err := Set(c, tt.key, tt.value); err != nil {
			t.Errorf("Set(%q, %q): %v", tt.key, tt.value, err)
			continue
		}
		if got := tt.get(c); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Set(%q, %q): got %#v, want %#v", tt.key, tt.value, got, tt.want)
		}
	}
	for _, bad := range []struct{ key, value, want string }{
		{"nope", "1", `unknown key "nope"`},
		{"nvidia-container-cli.nope", "1", `unknown key "nvidia-container-cli.nope"`},
		{"nvidia-container-cli.root.x", "1", "nvidia-container-cli.root is not a table"},
		{"nvidia-container-cli", "1", "is a table, not a value"},
		{"disable-require", "maybe", `value "maybe" is not a boolean`},
		{"disable-require", "nil", "not a boolean"},
	} {
		err := Set(Default(), bad.key, bad.value)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Set(%q, %q) = %v, want %q", bad.key, bad.value, err, bad.want)
		}
	}
}

func TestKeys(t *testing.T) {
	keys := Keys()
	for _, k := range []string{"accept-nvidia-visible-devices-envvar-when-unprivileged", "nvidia-container-cli.no-pivot", "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags", "features.ignore-imex-channel-requests", "nvidia-ctk.path"} {
		found := false
		for _, have := range keys {
			found = found || have == k
		}
		if !found {
			t.Errorf("Keys() lacks %q", k)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	for _, l := range []string{"panic", "fatal", "error", "warn", "warning", "info", "debug", "trace", "DEBUG"} {
		c := Default()
		c.Runtime.LogLevel = l
		if _, err := c.SlogLevel(); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
}

func BenchmarkParseDefaultFile(b *testing.B) {
	data := []byte(nvidiaDefaultFile)
	for b.Loop() {
		if _, err := Parse(data, "config.toml"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCUDACompatOn: the runtime's legacy path does CUDA compat for the
// modes NVIDIA's legacy path does it in (through the CLI, or the hook its
// runtime adds).
func TestCUDACompatOn(t *testing.T) {
	for _, tc := range []struct {
		mode           string
		allow, disable bool
		want           bool
	}{
		{"ldconfig", false, false, true},
		{"mount", false, false, true},
		{"hook", false, false, true},
		{"hook", false, true, false},
		{"disabled", false, false, false},
		{"bogus", false, false, false},
		{"bogus", true, false, true},
		{"ldconfig", false, true, true},
	} {
		c := Default()
		c.Runtime.Modes.Legacy.CUDACompatMode = tc.mode
		c.Features.AllowCUDACompatLibsFromContainer = tc.allow
		c.Features.DisableCUDACompatLibHook = tc.disable
		if got := c.CUDACompatOn(); got != tc.want {
			t.Errorf("mode %q, allow %v, disable hook %v: CUDACompatOn = %v, want %v", tc.mode, tc.allow, tc.disable, got, tc.want)
		}
	}
}
