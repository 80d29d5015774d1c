package parity

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRuntimeArgv runs nvidia-container-runtime on each command line of
// testdata/request/runtime-argv.txt and compares with NVIDIA's runtime
// which bundle's config.json it edited (its bundle detection: -b,
// --bundle, --bundle=, global flags before the subcommand, a bundle named
// "create"), whether it failed, and what the low-level runtime got.
func TestRuntimeArgv(t *testing.T) {
	runtime := tool(t, "nvidia-container-runtime")
	dir := t.TempDir()
	write(t, dir, "/cdi/parity.yaml", "cdiVersion: 0.5.0\nkind: parity.example.com/dev\ndevices:\n- name: x\n  containerEdits:\n    env: [\"PARITY_INJECTED=1\"]\n", 0o644)
	write(t, dir, "/low-level-runtime", "#!/bin/sh\nprintf '%s\\n' \"$@\" >\"$STUB_OUT\"\n", 0o755)
	write(t, dir, "/xdg/nvidia-container-runtime/config.toml", fmt.Sprintf(
		"[nvidia-container-runtime]\nmode = \"cdi\"\nruntimes = [%q]\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [%q]\n",
		filepath.Join(dir, "low-level-runtime"), filepath.Join(dir, "cdi")), 0o644)
	bundles := []string{"A", "B", "create", "cwd"}
	cases := readArgvCases(t, "request/runtime-argv.txt")
	out := filepath.Join(dir, "argv")
	var b strings.Builder
	for _, args := range cases {
		for _, name := range bundles {
			write(t, bundleDir(dir, name), "/config.json", `{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"cwd":"/","args":["sh"],"env":["NVIDIA_VISIBLE_DEVICES=parity.example.com/dev=x"]}}`, 0o644)
			mkdir(t, bundleDir(dir, name), "/rootfs")
		}
		cmd := exec.Command(runtime, args...)
		cmd.Dir = filepath.Join(dir, "cwd")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg"), "STUB_OUT=" + out}
		output, err := cmd.CombinedOutput()
		rc := exitCode(t, fmt.Sprintf("%q", args), err)
		t.Logf("%q: exit %d\n%s", args, rc, output)
		var edited []string
		for _, name := range bundles {
			data, err := os.ReadFile(filepath.Join(bundleDir(dir, name), "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), "PARITY_INJECTED") {
				edited = append(edited, name)
			}
		}
		passed := "low-level runtime not run"
		if data, err := os.ReadFile(out); err == nil {
			got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			passed = "low-level runtime got the same arguments"
			if strings.Join(got, "\x00") != strings.Join(args, "\x00") {
				passed = fmt.Sprintf("low-level runtime got %q", got)
			}
			os.Remove(out)
		}
		fmt.Fprintf(&b, "%s: exit %s: edited %s; %s\n", quoteArgs(args), exitClass(rc), orNone(edited), passed)
	}
	golden(t, "request/runtime-argv.golden", b.String(), nil, runtimeArgvDifferences)
}

// runtimeArgvDifferences turns NVIDIA's results into nctk's where nctk
// differs on purpose (docs/nvidia-parity.md).
func runtimeArgvDifferences(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, `"run" `):
			// nctk intercepts run as well as create; NVIDIA's runtime
			// passes run through untouched.
			l = strings.Replace(l, "edited none", "edited "+map[bool]string{true: "A", false: "cwd"}[strings.Contains(l, `"A"`)], 1)
		case strings.HasPrefix(l, `"state" "create"`), strings.HasPrefix(l, `"exec" "create"`), strings.HasPrefix(l, `"kill" "create"`):
			// NVIDIA's runtime takes any argument "create" for the
			// subcommand, here a container named create, and edits the
			// current directory's config.json; nctk reads the command
			// line as runc does.
			l = strings.Replace(l, "edited cwd", "edited none", 1)
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}

// bundleDir is where the bundle name of TestRuntimeArgv is: "cwd" is the
// runtime's working directory, the others are below it.
func bundleDir(dir, name string) string {
	if name == "cwd" {
		return filepath.Join(dir, "cwd")
	}
	return filepath.Join(dir, "cwd", name)
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ",")
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, " ")
}

// readArgvCases reads a file of command lines, one per line as Go-quoted
// arguments, '#' comments.
func readArgvCases(t *testing.T, name string) [][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var cases [][]string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var args []string
		for line != "" {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				t.Fatalf("%s:%d: %v", name, n+1, err)
			}
			a, _ := strconv.Unquote(q)
			args = append(args, a)
			line = strings.TrimSpace(line[len(q):])
		}
		cases = append(cases, args)
	}
	return cases
}
