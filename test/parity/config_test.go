package parity

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// configKeys are the settings TestConfigCommand compares, with the value
// each has when a config.toml leaves it out (NVIDIA prints its defaults
// commented out, nctk prints them).
func configKeys() []struct{ key, def string } {
	return []struct{ key, def string }{
		{"nvidia-container-cli.debug", ""},
		{"nvidia-container-cli.no-cgroups", "false"},
		{"nvidia-container-runtime.mode", "auto"},
		{"nvidia-container-runtime.log-level", "info"},
	}
}

// TestConfigCommand runs the nvidia-ctk config command lines of
// testdata/cli/config-args.txt (--config, -c, --config-file, --set,
// --in-place, -o, default) and compares the settings they print or write
// with NVIDIA's.
func TestConfigCommand(t *testing.T) {
	ctk := tool(t, "nvidia-ctk")
	var b strings.Builder
	for _, args := range readArgvCases(t, "cli/config-args.txt") {
		dir := t.TempDir()
		file, out := filepath.Join(dir, "config.toml"), filepath.Join(dir, "out.toml")
		write(t, dir, "/config.toml", "[nvidia-container-cli]\ndebug = \"/tmp/parity-cli.log\"\n[nvidia-container-runtime]\nmode = \"cdi\"\n", 0o644)
		argv := make([]string, len(args))
		for i, a := range args {
			argv[i] = strings.ReplaceAll(strings.ReplaceAll(a, "FILE", file), "OUT", out)
		}
		cmd := exec.Command(ctk, argv...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + dir}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		rc := exitCode(t, fmt.Sprint(args), cmd.Run())
		t.Logf("%q: exit %d\n%s", args, rc, stderr.String())
		result := stdout.String()
		where := "stdout"
		switch {
		case strings.Contains(strings.Join(args, " "), "OUT"):
			where = "OUT"
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			result = string(data)
		case slicesContainAny(args, "-i", "--in-place"):
			where = "FILE"
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			result = string(data)
		}
		fmt.Fprintf(&b, "%s: exit %s: %s: %s\n", quoteArgs(args), exitClass(rc), where, configValues(t, result))
	}
	golden(t, "cli/config.golden", b.String(), nil, nil)
}

func slicesContainAny(ss []string, vs ...string) bool {
	for _, s := range ss {
		for _, v := range vs {
			if s == v {
				return true
			}
		}
	}
	return false
}

// configValues reads the configKeys from a config.toml's text.
func configValues(t *testing.T, text string) string {
	t.Helper()
	var m map[string]any
	if err := toml.Unmarshal([]byte(text), &m); err != nil {
		return "not TOML: " + err.Error()
	}
	var out []string
	for _, k := range configKeys() {
		v := k.def
		var cur any = m
		for _, part := range strings.Split(k.key, ".") {
			table, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				break
			}
			cur = table[part]
		}
		if cur != nil {
			v = fmt.Sprint(cur)
		}
		out = append(out, k.key+"="+v)
	}
	return strings.Join(out, " ")
}
