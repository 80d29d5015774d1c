package parity

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// envCase is one container environment of testdata/request/hook-env.txt.
type envCase struct {
	name string
	env  []string
}

// readEnvCases reads a case file: "NAME "KEY=VALUE" ..." per line,
// '#' comments.
func readEnvCases(t *testing.T, name string) []envCase {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []envCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		caseName, rest, _ := strings.Cut(line, " ")
		c := envCase{name: caseName}
		for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				t.Fatalf("%s:%d: %v", name, n, err)
			}
			v, _ := strconv.Unquote(q)
			c.env = append(c.env, v)
			rest = rest[len(q):]
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestHookRequest runs nvidia-container-runtime-hook prestart (legacy mode)
// on each container environment of testdata/request/hook-env.txt, with a
// stub nvidia-container-cli that records its command line, and compares
// that command line (or the hook's failure) with NVIDIA's hook's: which
// NVIDIA_REQUIRE_* keys count, what CUDA_VERSION gives, the capabilities
// and devices. The --require flags are compared as a set (NVIDIA's come
// from a map, in random order).
func TestHookRequest(t *testing.T) {
	hook := tool(t, "nvidia-container-runtime-hook")
	dir := t.TempDir()
	stub := filepath.Join(dir, "nvidia-container-cli")
	out := filepath.Join(dir, "argv")
	write(t, dir, "/nvidia-container-cli", "#!/bin/sh\nprintf '%s\\n' \"$@\" >\"$STUB_OUT\"\n", 0o755)
	cfg := filepath.Join(dir, "config.toml")
	write(t, dir, "/config.toml", fmt.Sprintf("[nvidia-container-cli]\npath = %q\nenvironment = [%q]\n[nvidia-container-runtime]\nmode = \"legacy\"\n",
		stub, "STUB_OUT="+out), 0o644)
	var b strings.Builder
	for _, c := range readEnvCases(t, "request/hook-env.txt") {
		bundle := filepath.Join(dir, c.name)
		env, err := jsonStrings(c.env)
		if err != nil {
			t.Fatal(err)
		}
		write(t, bundle, "/config.json", `{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"cwd":"/","args":["sh"],"env":`+env+`}}`, 0o644)
		mkdir(t, bundle, "/rootfs")
		cmd := exec.Command(hook, "-config", cfg, "prestart")
		cmd.Dir = bundle
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.0.2","id":"parity","status":"creating","pid":1,"bundle":%q}`, bundle))
		output, err := cmd.CombinedOutput()
		rc := exitCode(t, c.name, err)
		t.Logf("%s: exit %d\n%s", c.name, rc, output)
		argv, err := os.ReadFile(out)
		switch {
		case err == nil:
			fmt.Fprintf(&b, "%s: exit %s: %s\n", c.name, exitClass(rc), cliArgs(string(argv), bundle))
		case os.IsNotExist(err):
			fmt.Fprintf(&b, "%s: exit %s: nvidia-container-cli not run\n", c.name, exitClass(rc))
		default:
			t.Fatal(err)
		}
		os.Remove(out)
	}
	golden(t, "request/hook-env.golden", b.String(), nil, hookEnvDifferences)
}

// hookEnvDifferences turns NVIDIA's results into nctk's where nctk differs
// on purpose (docs/nvidia-parity.md).
func hookEnvDifferences(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		name, _, _ := strings.Cut(l, ":")
		switch name {
		case "require-empty-value", "legacy-with-empty-require-cuda":
			// An empty NVIDIA_REQUIRE_* adds no condition: nctk passes no
			// empty --require.
			l = strings.Replace(l, `"--require=" `, "", 1)
		case "devices-duplicate":
			// NVIDIA's hook turns a repeated device into an empty list
			// entry (",0,1"); nctk drops the repeat.
			l = strings.Replace(l, `"--device=,0,1"`, `"--device=0,1"`, 1)
		case "cdi-name-in-legacy":
			// A CDI name is the runtime's to inject (nctk's does in every
			// mode); nctk's hook leaves it, with a warning. NVIDIA's hook
			// passes it to nvidia-container-cli as a device, which it
			// does not know.
			l = name + ": exit 0: nvidia-container-cli not run"
		case "imex-channels-bad":
			// nctk checks the channel numbers in the hook; NVIDIA's passes
			// them to nvidia-container-cli, which refuses "x" there.
			l = name + ": exit failure: nvidia-container-cli not run"
		case "require-invalid", "require-unknown-key":
			// nctk checks requirements on every path: an expression that
			// does not parse (an unknown operator or key) stops the hook;
			// NVIDIA's hook passes it to nvidia-container-cli, whose
			// parser (libnvidia-container's dsl_evaluate) refuses it there.
			l = name + ": exit failure: nvidia-container-cli not run"
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}

// cliArgs is a recorded nvidia-container-cli command line, one argument a
// line, as one line: the --require flags sorted, the bundle path as
// $BUNDLE.
func cliArgs(argv, bundle string) string {
	args := strings.Split(strings.TrimSuffix(argv, "\n"), "\n")
	var reqs []int
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, bundle, "$BUNDLE")
		if strings.HasPrefix(a, "--require=") {
			reqs = append(reqs, i)
		}
	}
	sorted := make([]string, len(reqs))
	for i, j := range reqs {
		sorted[i] = args[j]
	}
	slices.Sort(sorted)
	for i, j := range reqs {
		args[j] = sorted[i]
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	return strings.Join(quoted, " ")
}

// jsonStrings is a JSON array of ss.
func jsonStrings(ss []string) (string, error) {
	quoted := make([]string, len(ss))
	for i, s := range ss {
		q, err := jsonString(s)
		if err != nil {
			return "", err
		}
		quoted[i] = q
	}
	return "[" + strings.Join(quoted, ",") + "]", nil
}
