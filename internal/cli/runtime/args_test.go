package runtime

import (
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/config"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want invocation
	}{
		{"bundle long", []string{"create", "--bundle", "/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"bundle long eq", []string{"create", "--bundle=/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"bundle short", []string{"create", "-b", "/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"bundle short eq", []string{"create", "-b=/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"bundle single dash long", []string{"create", "-bundle", "/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"bundle single dash long eq", []string{"create", "-bundle=/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"bundle double dash short", []string{"create", "--b", "/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"bundle empty eq", []string{"create", "--bundle=", "id"}, invocation{Command: "create", CommandIndex: 1, ID: "id"}},
		{"no bundle", []string{"create", "id"}, invocation{Command: "create", CommandIndex: 1, ID: "id"}},
		{"last bundle wins", []string{"create", "-b", "/a", "--bundle", "/b", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"flag after id", []string{"create", "id", "--bundle", "/b"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"root before create", []string{"--root", "/x", "create", "--bundle", "/y", "id"},
			invocation{Root: "/x", Command: "create", CommandIndex: 3, Bundle: "/y", ID: "id"}},
		{"create as values", []string{"--root", "create", "create", "--bundle", "create", "create"},
			invocation{Root: "create", Command: "create", CommandIndex: 3, Bundle: "create", ID: "create"}},
		{"create as bundle only", []string{"create", "--bundle", "create", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "create", ID: "id"}},
		{"run detached", []string{"run", "-d", "--bundle", "/b", "id"}, invocation{Command: "run", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"run detached cwd", []string{"run", "-d", "id"}, invocation{Command: "run", CommandIndex: 1, ID: "id"}},
		{"containerd", []string{"--root", "/run/containerd/runc/k8s.io", "--log", "/b/log.json", "--log-format", "json",
			"--systemd-cgroup", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "--console-socket", "/s.sock", "id"},
			invocation{Root: "/run/containerd/runc/k8s.io", Log: "/b/log.json", LogFormat: "json", Command: "create", CommandIndex: 8, Bundle: "/b", ID: "id", PidFile: "/b/init.pid"}},
		{"podman eq form", []string{"--log-format=json", "--log=/run/oci-log", "--debug", "create", "--bundle", "/b", "--pid-file", "/p", "id"},
			invocation{Log: "/run/oci-log", LogFormat: "json", Debug: true, Command: "create", CommandIndex: 4, Bundle: "/b", ID: "id", PidFile: "/p"}},
		{"debug false", []string{"--debug=false", "create", "id"}, invocation{Command: "create", CommandIndex: 2, ID: "id"}},
		{"rootless eq", []string{"--rootless=true", "create", "-b", "/b", "id"}, invocation{Command: "create", CommandIndex: 2, Bundle: "/b", ID: "id"}},
		{"rootless value", []string{"--rootless", "false", "create", "-b", "/b", "id"}, invocation{Command: "create", CommandIndex: 3, Bundle: "/b", ID: "id"}},
		{"criu", []string{"--criu", "/usr/sbin/criu", "restore", "--bundle", "/b", "--image-path", "/i", "id"},
			invocation{Command: "restore", CommandIndex: 3, Bundle: "/b", ID: "id"}},
		{"crun cgroup manager", []string{"--cgroup-manager", "systemd", "run", "-b", "/b", "id"}, invocation{Command: "run", CommandIndex: 3, Bundle: "/b", ID: "id"}},
		{"unknown bool global", []string{"--no-such-flag", "create", "-b", "/b", "id"}, invocation{Command: "create", CommandIndex: 2, Bundle: "/b", ID: "id"}},
		{"unknown value global", []string{"--no-such-flag", "val", "create", "-b", "/b", "id"}, invocation{Command: "create", CommandIndex: 3, Bundle: "/b", ID: "id"}},
		{"unknown eq global", []string{"--no-such=val", "state", "id"}, invocation{Command: "state", CommandIndex: 2}},
		{"unknown command flags", []string{"create", "--no-such", "-b", "/b", "--new-flag=x", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"value flags skip", []string{"create", "--pid-file", "-b", "id"}, invocation{Command: "create", CommandIndex: 1, ID: "id", PidFile: "-b"}},
		{"preserve fds", []string{"create", "--no-pivot", "--preserve-fds", "3", "-b", "/b", "--no-new-keyring", "id"},
			invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"after double dash", []string{"create", "id", "--", "-b", "/b"}, invocation{Command: "create", CommandIndex: 1, ID: "id"}},
		{"global double dash", []string{"--", "create", "-b", "/b", "id"}, invocation{Command: "create", CommandIndex: 2, Bundle: "/b", ID: "id"}},
		{"state named create", []string{"state", "create"}, invocation{Command: "state", CommandIndex: 1}},
		{"delete", []string{"--root", "/r", "delete", "--force", "id"}, invocation{Root: "/r", Command: "delete", CommandIndex: 3}},
		{"exec", []string{"exec", "--process", "/p.json", "-d", "id"}, invocation{Command: "exec", CommandIndex: 1}},
		{"exec trailing bundle-like", []string{"exec", "id", "-b"}, invocation{Command: "exec", CommandIndex: 1}},
		{"version", []string{"--version"}, invocation{Version: true, CommandIndex: -1}},
		{"version short", []string{"-v"}, invocation{Version: true, CommandIndex: -1}},
		{"help", []string{"--help"}, invocation{Help: true, CommandIndex: -1}},
		{"features", []string{"features"}, invocation{Command: "features", CommandIndex: 1}},
		{"empty", nil, invocation{CommandIndex: -1}},
		{"dangling global value", []string{"--root"}, invocation{CommandIndex: -1}},
		{"id after double dash", []string{"create", "-b", "/b", "--", "id"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id"}},
		{"pid file eq", []string{"create", "--pid-file=/run/p", "id", "-b", "/b"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", ID: "id", PidFile: "/run/p"}},
		{"no id", []string{"create", "-b", "/b", "--pid-file", "/p"}, invocation{Command: "create", CommandIndex: 1, Bundle: "/b", PidFile: "/p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseArgs(append([]string{"nvidia-container-runtime"}, tt.args...))
			if err != nil {
				t.Fatal(err)
			}
			if *got != tt.want {
				t.Errorf("parseArgs(%q)\n got  %+v\n want %+v", tt.args, *got, tt.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"create", "id", "-b"},
		{"create", "id", "--bundle"},
		{"run", "-d", "id", "-bundle"},
		{"--root", "/r", "create", "--b"},
	} {
		_, err := parseArgs(append([]string{"nvidia-container-runtime"}, args...))
		if err == nil || !strings.Contains(err.Error(), "needs a value") {
			t.Errorf("parseArgs(%q) err = %v, want a missing value error", args, err)
		}
	}
}

func TestInjects(t *testing.T) {
	for cmd, want := range map[string]bool{"create": true, "run": true, "restore": false, "start": false, "exec": false, "": false} {
		if got := (&invocation{Command: cmd}).injects(); got != want {
			t.Errorf("injects(%q) = %v", cmd, got)
		}
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("--root\x00/x\x00create\x00--bundle\x00/y\x00id")
	f.Add("create\x00-b=\x00id")
	f.Add("run\x00-d\x00--\x00-b")
	f.Add("--log-format=json\x00--unknown\x00v\x00create\x00id\x00-b")
	f.Fuzz(func(t *testing.T, s string) {
		args := append([]string{"nvidia-container-runtime"}, strings.Split(s, "\x00")...)
		inv, err := parseArgs(args)
		if inv == nil {
			t.Fatal("nil invocation")
		}
		if err != nil {
			return
		}
		if inv.CommandIndex >= 0 && args[inv.CommandIndex] != inv.Command {
			t.Fatalf("CommandIndex %d does not point at %q", inv.CommandIndex, inv.Command)
		}
	})
}

// TestNameMode: the runtime binary's installed names fix the mode as
// NVIDIA's do; any other name (a wrapper's .real, a renamed copy) leaves it
// to config.toml.
func TestNameMode(t *testing.T) {
	for name, want := range map[string]string{
		"nvidia-container-runtime":        "",
		"nvidia-container-runtime.cdi":    config.ModeCDI,
		"nvidia-container-runtime.legacy": config.ModeLegacy,
		"nvidia-container-runtime.real":   "",
		"nctk":                            "",
	} {
		if got := nameMode(name); got != want {
			t.Errorf("nameMode(%q) = %q, want %q", name, got, want)
		}
	}
}
