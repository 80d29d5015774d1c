package hookargs

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// roundTrip are hooks with their command lines as NVIDIA's and nctk's
// tools spell them.
func roundTrip() []struct {
	hook Hook
	args []string
} {
	return []struct {
		hook Hook
		args []string
	}{
		{CreateSymlinks{Links: []Link{{"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"}, {"../../lib/libnvidia-ml.so.1", "/usr/lib/z"}}},
			[]string{"create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so", "--link", "../../lib/libnvidia-ml.so.1::/usr/lib/z"}},
		{CreateSymlinks{}, []string{"create-symlinks"}},
		{UpdateLdcache{Folders: []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"}},
			[]string{"update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu", "--folder", "/usr/lib/i386-linux-gnu"}},
		{UpdateLdcache{LdconfigPath: "/sbin/ldconfig.real", Folders: []string{"/usr/lib64"}, Libs: []string{"/usr/lib64/libcuda.so.535.1", "/usr/lib64/libcuda.so.1"}},
			[]string{"update-ldcache", "--ldconfig-path", "/sbin/ldconfig.real", "--folder", "/usr/lib64",
				"--lib", "/usr/lib64/libcuda.so.535.1", "--lib", "/usr/lib64/libcuda.so.1"}},
		{DisableDeviceNodeModification{}, []string{"disable-device-node-modification"}},
		{DisableDeviceNodeModification{HostDir: "/run/p"}, []string{"disable-device-node-modification", "--host-dir", "/run/p"}},
		{MountProcDriver{HostDir: "/proc/driver/nvidia", Files: []string{"params", "version"}, GPUs: []string{"0000:3b:00.0"}, Expose: []string{"capabilities/mig/config"}},
			[]string{"mount-proc-driver", "--host-dir", "/proc/driver/nvidia", "--file", "params", "--file", "version",
				"--gpu", "0000:3b:00.0", "--expose", "capabilities/mig/config"}},
		{MountProcDriver{}, []string{"mount-proc-driver"}},
		{UpdateLdcache{Common: Common{ContainerSpec: "/b/config.json"}, Folders: []string{"/l"}},
			[]string{"update-ldcache", "--folder", "/l", "--container-spec", "/b/config.json"}},
		{EnableCudaCompat{HostDriverVersion: "580.159.04"}, []string{"enable-cuda-compat", "--host-driver-version=580.159.04"}},
		{EnableCudaCompat{HostDriverVersion: "580.1", HostCudaVersion: "13.0", CompatDir: "/usr/local/cuda/compat_orin", Common: Common{ContainerSpec: "/b/c.json"}},
			[]string{"enable-cuda-compat", "--host-driver-version=580.1", "--host-cuda-version=13.0",
				"--cuda-compat-container-root", "/usr/local/cuda/compat_orin", "--container-spec", "/b/c.json"}},
		{EnableCudaCompat{}, []string{"enable-cuda-compat"}},
		{UpdateLdcache{Common: Common{Debug: true, Quiet: true}, Folders: []string{"/l"}},
			[]string{"update-ldcache", "--folder", "/l", "--debug", "--quiet"}},
		{UpdateApplicationProfile{}, []string{"update-application-profile"}},
		{Chmod{Mode: 0o755, Paths: []string{"/dev/dri", "/dev/nvidia-caps"}},
			[]string{"chmod", "--mode", "755", "--path", "/dev/dri", "--path", "/dev/nvidia-caps"}},
		{Chmod{Mode: 0o4750}, []string{"chmod", "--mode", "4750"}},
		{Noop{}, []string{"noop"}},
	}
}

// TestRoundTrip: Args writes the spellings, and Parse reads them back into
// an equal value.
func TestRoundTrip(t *testing.T) {
	for _, tc := range roundTrip() {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if got := tc.hook.Args(); !slices.Equal(got, tc.args) {
				t.Errorf("Args = %q, want %q", got, tc.args)
			}
			got, err := Parse(tc.hook.Args())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.hook) {
				t.Errorf("Parse(Args) = %#v, want %#v", got, tc.hook)
			}
		})
	}
}

// TestChainRoundTrip: Command chains hooks with ";" after the program name;
// SplitChain and Parse give them back in order; Chain joins two calls.
func TestChainRoundTrip(t *testing.T) {
	var hooks []Hook
	for _, tc := range roundTrip() {
		hooks = append(hooks, tc.hook)
	}
	cmd := Command(hooks...)
	if cmd[0] != Binary || cmd[1] != NameCreateSymlinks {
		t.Fatalf("Command = %q", cmd)
	}
	if n := strings.Count(strings.Join(cmd, "\x00")+"\x00", "\x00"+ChainSeparator+"\x00"); n != len(hooks)-1 {
		t.Errorf("%d separators, want %d: %q", n, len(hooks)-1, cmd)
	}
	segs := SplitChain(cmd[1:])
	if len(segs) != len(hooks) {
		t.Fatalf("SplitChain: %d hooks, want %d", len(segs), len(hooks))
	}
	for i, s := range segs {
		h, err := Parse(s)
		if err != nil || !reflect.DeepEqual(h, hooks[i]) {
			t.Errorf("hook %d: Parse(%q) = %#v, %v; want %#v", i, s, h, err, hooks[i])
		}
	}
	if got := Chain(Command(hooks[:3]...), Command(hooks[3:]...)); !slices.Equal(got, cmd) {
		t.Errorf("Chain = %q, want %q", got, cmd)
	}
	if got := Chain(Command(hooks[0]), []string{Binary}); !slices.Equal(got, Command(hooks[0])) {
		t.Errorf("Chain with an empty call = %q", got)
	}
	if got, want := CommandFor("/usr/bin/nvidia-ctk", Command(hooks[4])), []string{"nvidia-ctk", "hook", "disable-device-node-modification"}; !slices.Equal(got, want) {
		t.Errorf("CommandFor(nvidia-ctk) = %q, want %q", got, want)
	}
	if got := CommandFor("/opt/nvidia-cdi-hook", cmd); !slices.Equal(got, cmd) {
		t.Errorf("CommandFor(nvidia-cdi-hook) = %q, want %q", got, cmd)
	}
}

func TestSplitChain(t *testing.T) {
	tests := []struct {
		in   []string
		want [][]string
	}{
		{nil, nil},
		{[]string{";", ";"}, nil},
		{[]string{"a", "--x", "1"}, [][]string{{"a", "--x", "1"}}},
		{[]string{";", "a", ";", ";", "b", "--y", ";"}, [][]string{{"a"}, {"b", "--y"}}},
	}
	for _, tc := range tests {
		if got := SplitChain(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitChain(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestParseSpellings: the forms the flag syntax allows read the same.
func TestParseSpellings(t *testing.T) {
	want := CreateSymlinks{Links: []Link{{"a", "/x"}, {"b", "/y"}}}
	for _, args := range [][]string{
		{"create-symlinks", "--link", "a::/x", "--link", "b::/y"},
		{"create-symlinks", "--link=a::/x", "-link", "b::/y"},
	} {
		got, err := Parse(args)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %#v, %v", args, got, err)
		}
	}
	// NVIDIA's list flags also split their values at commas; nctk's
	// --lib does not.
	splits := []struct {
		args []string
		want Hook
	}{
		{[]string{"create-symlinks", "--link", "a::/x,b::/y"}, CreateSymlinks{Links: []Link{{"a", "/x"}, {"b", "/y"}}}},
		{[]string{"update-ldcache", "--folder=/a,/b", "--folder", "/c", "--lib", "/a/lib,x.so"},
			UpdateLdcache{Folders: []string{"/a", "/b", "/c"}, Libs: []string{"/a/lib,x.so"}}},
		{[]string{"chmod", "--mode", "755", "--path", "/dev/dri,/dev/nvidia-caps"}, Chmod{Mode: 0o755, Paths: []string{"/dev/dri", "/dev/nvidia-caps"}}},
	}
	for _, tc := range splits {
		got, err := Parse(tc.args)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", tc.args, got, err, tc.want)
		}
	}
	if _, err := Parse([]string{"update-ldcache", "--folder", "/a,"}); err == nil {
		t.Error("an empty folder after a comma was accepted")
	}
	// The global logging flags after the hook name, as NVIDIA spells them.
	for _, args := range [][]string{
		{"update-application-profile", "-d"},
		{"update-application-profile", "--debug=true"},
		{"update-application-profile", "-debug"},
	} {
		got, err := Parse(args)
		if want := (UpdateApplicationProfile{Common: Common{Debug: true}}); err != nil || got != want {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", args, got, err, want)
		}
	}
	// A value may start with a dash.
	got, err := Parse([]string{"update-ldcache", "--folder", "-"})
	if err == nil || !strings.Contains(err.Error(), `invalid --folder "-"`) {
		t.Errorf("--folder -: %#v, %v", got, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		args []string
		err  string
	}{
		{nil, "no hook name"},
		{[]string{"create-symlinks", "--bogus"}, "bogus"},
		{[]string{"create-symlinks", "--link"}, "needs an argument"},
		{[]string{"create-symlinks", "--link", "nolink"}, `invalid --link "nolink": want TARGET::LINK`},
		{[]string{"create-symlinks", "--link", "::/x"}, "want TARGET::LINK"},
		{[]string{"create-symlinks", "--link", "a::"}, "want TARGET::LINK"},
		{[]string{"create-symlinks", "--link", "a::/b::c"}, "want TARGET::LINK"},
		{[]string{"create-symlinks", "--link", "a::relative"}, "absolute container path"},
		{[]string{"create-symlinks", "--link", "a:::/b"}, "absolute container path"},
		{[]string{"create-symlinks", "positional"}, `unexpected argument "positional"`},
		{[]string{"update-ldcache", "--folder", "relative"}, `invalid --folder "relative": not an absolute container path`},
		{[]string{"enable-cuda-compat", "--cuda-compat-container-root", "usr/local/cuda/compat"}, "not an absolute container path"},
		{[]string{"enable-cuda-compat", "--cuda-compat-container-root="}, "not an absolute container path"},
		{[]string{"chmod", "--path", "/dev/dri"}, "--mode is required"},
		{[]string{"chmod", "--mode", " "}, "--mode is required"},
		{[]string{"chmod", "--mode", "rwx"}, `invalid --mode "rwx": not an octal mode`},
		{[]string{"chmod", "--mode", "0789"}, "not an octal mode"},
		{[]string{"chmod", "--mode", "17777"}, "more than 07777"},
		{[]string{"chmod", "--mode", "755", "--path", " "}, "empty path"},
		{[]string{"update-application-profile", "extra"}, `unexpected argument "extra"`},
		{[]string{"update-ldcache", "--lib", "lib/libcuda.so.1"}, `invalid --lib "lib/libcuda.so.1": not an absolute container path`},
		{[]string{"update-ldcache", "--ldconfig-path", "sbin/ldconfig"}, "not an absolute host path"},
		{[]string{"update-ldcache", "--ldconfig-path", ""}, "not an absolute host path"},
		{[]string{"mount-proc-driver", "--host-dir", "proc"}, `invalid --host-dir "proc": not an absolute host path`},
		{[]string{"disable-device-node-modification", "--host-dir="}, "not an absolute host path"},
		{[]string{"disable-device-node-modification", "--link", "a::/b"}, "link"},
	}
	for _, tc := range tests {
		h, err := Parse(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) = %#v, %v; want error %q", tc.args, h, err, tc.err)
		}
	}
}

func TestParseUnknownAndHelp(t *testing.T) {
	_, err := Parse([]string{"some-future-hook", "--host-driver-version", "580.1"})
	var unknown *UnknownHookError
	if !errors.As(err, &unknown) || unknown.Name != "some-future-hook" {
		t.Errorf("unknown hook: %v", err)
	}
	for _, name := range Names() {
		if _, err := Parse([]string{name, "-h"}); name != NameNoop && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s -h: %v, want flag.ErrHelp", name, err)
		}
	}
	if h, err := Parse([]string{"noop", "-d", "--quiet", "x", "--y"}); err != nil || h != (Noop{}) {
		t.Errorf("noop with arguments: %#v, %v", h, err)
	}
	if _, err := Parse([]string{"noop", "--anything"}); err == nil {
		t.Error("noop --anything: accepted, want an error as NVIDIA's")
	}
}

func TestUsage(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	for _, n := range Names() {
		listed := strings.Contains("\n"+b.String(), "\n  "+n+" ") || strings.Contains("\n"+b.String(), "\n  "+n+"\n")
		if hidden := n == NameNoop; listed == hidden {
			t.Errorf("Usage lists %s: %v, want %v (hidden: noop only):\n%s", n, listed, !hidden, b.String())
		}
	}
	b.Reset()
	HookUsage(&b, "nvidia-ctk hook", NameCreateSymlinks)
	if !strings.HasPrefix(b.String(), "Usage: nvidia-ctk hook create-symlinks --link") ||
		!strings.Contains(b.String(), "-link value") || !strings.Contains(b.String(), "-container-spec") {
		t.Errorf("HookUsage(create-symlinks) = %q", b.String())
	}
	b.Reset()
	HookUsage(&b, Binary, "nonexistent")
	if b.Len() != 0 {
		t.Errorf("HookUsage(unknown) = %q", b.String())
	}
}

func TestLinkCheck(t *testing.T) {
	tests := []struct {
		l   Link
		err string
	}{
		{Link{"libcuda.so.1", "/usr/lib/libcuda.so"}, ""},
		{Link{"/abs/target", "/l"}, ""},
		{Link{"", "/l"}, "empty"},
		{Link{"a::b", "/l"}, "::"},
		{Link{"a:", "/l"}, "::"},
		{Link{"a", "/l::x"}, "::"},
		{Link{"a", "rel"}, "absolute"},
		{Link{"a,b", "/l"}, `","`},
		{Link{"a", "/l,m"}, `","`},
	}
	for _, tc := range tests {
		err := tc.l.Check()
		if tc.err == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.l, err)
				continue
			}
			// What Check accepts reads back as itself.
			got, err := ParseLink(tc.l.String())
			if err != nil || got != tc.l {
				t.Errorf("ParseLink(%q) = %+v, %v", tc.l.String(), got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want %q", tc.l, err, tc.err)
		}
	}
}

func TestEnv(t *testing.T) {
	want := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_DEBUG=false", "GOMAXPROCS=1"}
	if got := Env(); !slices.Equal(got, want) {
		t.Errorf("Env = %q, want %q", got, want)
	}
}

// FuzzParse: Parse never panics; what it accepts, Args writes back into a
// command line that Parse reads into an equal value (and every link of it
// passes Link.Check).
func FuzzParse(f *testing.F) {
	for _, tc := range roundTrip() {
		f.Add(strings.Join(tc.hook.Args(), "\x00"))
	}
	f.Add("create-symlinks\x00--link=a:::/b")
	f.Add("update-ldcache\x00--ldconfig-path=\x00--folder\x00-")
	f.Add("mount-proc-driver\x00-h")
	f.Add("noop\x00--x")
	f.Add("enable-cuda-compat\x00--host-driver-version=580.159.04\x00--cuda-compat-container-root=rel")
	f.Add("update-application-profile\x00--container-spec=/b/c.json")
	f.Add("chmod\x00--mode=0755\x00--path=/dev/dri")
	f.Add("chmod\x00--mode=89\x00--path=")
	f.Add("future-hook")
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		h, err := Parse(args)
		if err != nil {
			return
		}
		again, err := Parse(h.Args())
		if err != nil {
			t.Fatalf("Parse(%q) = %#v, but Parse of its Args %q: %v", args, h, h.Args(), err)
		}
		if !reflect.DeepEqual(again, h) {
			t.Fatalf("Parse(%q) = %#v, Parse(Args) = %#v", args, h, again)
		}
		if c, ok := h.(CreateSymlinks); ok {
			for _, l := range c.Links {
				if err := l.Check(); err != nil {
					t.Fatalf("parsed link %+v fails Check: %v", l, err)
				}
			}
		}
	})
}
