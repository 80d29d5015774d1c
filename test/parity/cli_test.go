package parity

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// surfaceFile lists NVIDIA 1.20's command-line surface: every command
// (with its aliases) and flag (with its aliases) of nvidia-ctk,
// nvidia-cdi-hook, nvidia-container-runtime and
// nvidia-container-runtime-hook, as read from their built binaries' help
// (TestCLISurface -update writes it; no help text is kept). One entry a
// line, tab-separated:
//
//	TOOL  COMMAND PATH  command
//	TOOL  COMMAND PATH  flag  KIND  NAME  SAMPLE
//
// KIND is bool, string or int, found by giving NVIDIA's binary the flag
// with values of each kind; SAMPLE is the value the check gives a string
// or int flag (NVIDIA's default where its help shows one).
const surfaceFile = "cli/surface.txt"

// surfaceEntry is one line of surfaceFile.
type surfaceEntry struct {
	tool, path, what, kind, name, sample string
}

func (e surfaceEntry) String() string {
	fields := []string{e.tool, e.path, e.what}
	if e.what == "flag" {
		fields = append(fields, e.kind, e.name, e.sample)
	}
	return strings.Join(fields, "\t")
}

// args is the command line that checks the entry: the command path, then
// the flag with a value of its kind, then the help flag, so that nothing
// runs; the flag must parse.
func (e surfaceEntry) args() []string {
	args := strings.Fields(e.path)
	help := "--help"
	if e.tool == "nvidia-container-runtime-hook" {
		help = "-help"
	}
	switch {
	case e.what == "command":
		return append(args, help)
	case e.kind == "bool":
		return append(args, e.name, help)
	default:
		return append(args, e.name+"="+e.sample, help)
	}
}

// TestCLISurface checks that nctk's tools accept every command and flag of
// NVIDIA 1.20's (testdata/cli/surface.txt): each command's help, and each
// flag given a value of its kind before --help, exits 0. With -update it
// writes the list from NVIDIA's binaries instead.
func TestCLISurface(t *testing.T) {
	if *update {
		writeSurface(t)
		return
	}
	data, err := os.ReadFile(filepath.Join("testdata", surfaceFile))
	if err != nil {
		t.Fatal(err)
	}
	plainBundle := t.TempDir()
	write(t, plainBundle, "/config.json", `{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"cwd":"/","args":["sh"],"env":["PATH=/bin"]}}`, 0o644)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(line, "\t")
		e := surfaceEntry{tool: f[0], path: f[1], what: f[2]}
		if e.what == "flag" {
			e.kind, e.name, e.sample = f[3], f[4], f[5]
		}
		bin := tool(t, e.tool)
		cmd := exec.Command(bin, e.args()...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		if e.tool == "nvidia-container-runtime-hook" && e.what == "command" {
			// The hook's commands take no flags: each is run on the
			// OCI state of a container that asks for no GPU.
			cmd = exec.Command(bin, e.path)
			cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.0.2","id":"parity","status":"creating","pid":1,"bundle":%q}`, plainBundle))
		}
		out, err := cmd.CombinedOutput()
		if err == nil && (strings.Contains(string(out), "flag provided but not defined") || strings.Contains(string(out), "unsupported CDI hook")) {
			// nvidia-cdi-hook ignores what it does not know, with a
			// warning: not an acceptance.
			err = errors.New("ignored with a warning")
		}
		if err != nil {
			t.Errorf("%s %s: %v (NVIDIA's accepts it)\n%s", e.tool, strings.Join(e.args(), " "), err, lastLines(string(out), 4))
		}
		n++
	}
	t.Logf("%d commands and flags checked", n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// writeSurface enumerates NVIDIA's tools (in binDir) into surfaceFile.
func writeSurface(t *testing.T) {
	var entries []surfaceEntry
	for _, tl := range []string{"nvidia-ctk", "nvidia-cdi-hook"} {
		entries = append(entries, persistentFlags(t, urfaveSurface(t, tl, nil, true))...)
	}
	entries = append(entries, goFlagSurface(t, "nvidia-container-runtime-hook")...)
	entries = append(entries, runtimeSurface(t)...)
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.String() + "\n")
	}
	golden(t, surfaceFile, b.String(), nil, nil)
}

var (
	helpSection = regexp.MustCompile(`^([A-Z ]+):$`)
	defaultRe   = regexp.MustCompile(`\(default: "([^"]*)"`)
	defaultNum  = regexp.MustCompile(`\(default: ([0-9]+)\)`)
)

// urfaveSurface reads the help of tool's command path (a urfave/cli
// program) and of each of its commands, recursively. Global options are
// read at the top only.
func urfaveSurface(t *testing.T, tl string, path []string, top bool) []surfaceEntry {
	t.Helper()
	out := helpOf(t, tl, append(slices.Clone(path), "--help")...)
	sections := map[string][]string{}
	var cur string
	for _, l := range strings.Split(out, "\n") {
		if m := helpSection.FindStringSubmatch(l); m != nil {
			cur = m[1]
			continue
		}
		if strings.TrimSpace(l) == "" {
			cur = ""
			continue
		}
		if cur != "" {
			sections[cur] = append(sections[cur], l)
		}
	}
	p := strings.Join(path, " ")
	var entries []surfaceEntry
	flagLines := sections["OPTIONS"]
	if top {
		flagLines = append(flagLines, sections["GLOBAL OPTIONS"]...)
	}
	for _, l := range flagLines {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "-") {
			continue // a continuation line
		}
		spec, desc, _ := strings.Cut(l, "  ")
		if i := strings.Index(spec, " ["); i >= 0 {
			spec = spec[:i] // "[ --flag string ]": repeatable
		}
		var names []string
		for _, part := range strings.Split(spec, ", ") {
			names = append(names, strings.Fields(part)[0])
		}
		if names[0] == "--help" {
			continue
		}
		sample := flagSample(names[0])
		if m := defaultRe.FindStringSubmatch(desc); m != nil && m[1] != "" {
			sample = m[1]
		} else if m := defaultNum.FindStringSubmatch(desc); m != nil {
			sample = m[1]
		}
		kind := flagKind(t, tl, path, names[0], sample)
		if kind == "bool" {
			sample = "-"
		}
		for _, n := range names {
			entries = append(entries, surfaceEntry{tool: tl, path: p, what: "flag", kind: kind, name: n, sample: sample})
		}
	}
	for _, l := range sections["COMMANDS"] {
		spec, _, _ := strings.Cut(strings.TrimSpace(l), "  ")
		names := strings.Split(spec, ", ")
		for _, n := range names {
			entries = append(entries, surfaceEntry{tool: tl, path: strings.TrimSpace(p + " " + n), what: "command"})
		}
		if names[0] == "help" {
			continue
		}
		entries = append(entries, urfaveSurface(t, tl, append(slices.Clone(path), names[0]), false)...)
	}
	return entries
}

// persistentFlags adds to the entries of one urfave tool its global flags
// under each command that accepts them (urfave/cli v3's global flags are
// persistent: NVIDIA's take --debug after the command), found by giving
// them to NVIDIA's binary.
func persistentFlags(t *testing.T, entries []surfaceEntry) []surfaceEntry {
	t.Helper()
	var globals []surfaceEntry
	local := map[string]bool{}
	for _, e := range entries {
		if e.what == "flag" && e.path == "" {
			globals = append(globals, e)
		}
		if e.what == "flag" {
			local[e.path+"\x00"+e.name] = true
		}
	}
	var out []surfaceEntry
	for _, e := range entries {
		out = append(out, e)
		if e.what != "command" || e.path == "help" || e.path == "h" || strings.HasSuffix(e.path, " help") || strings.HasSuffix(e.path, " h") {
			continue
		}
		for _, g := range globals {
			if local[e.path+"\x00"+g.name] {
				continue
			}
			g.path = e.path
			args := g.args()
			if exec.Command(filepath.Join(binDir, g.tool), args...).Run() == nil {
				out = append(out, g)
				local[g.path+"\x00"+g.name] = true
			}
		}
	}
	return out
}

// flagKind finds the kind of NVIDIA's flag name of tool's command path by
// giving it values of each kind before --help.
func flagKind(t *testing.T, tl string, path []string, name, sample string) string {
	t.Helper()
	accepts := func(v string) bool {
		cmd := exec.Command(filepath.Join(binDir, tl), append(slices.Clone(path), name+"="+v, "--help")...)
		return cmd.Run() == nil
	}
	switch {
	case accepts(sample) && accepts("parity-probe"):
		return "string"
	case accepts("2"):
		return "int"
	case accepts("true"):
		return "bool"
	case accepts(sample):
		return "string"
	}
	t.Fatalf("%s %s %s: no value kind accepted", tl, strings.Join(path, " "), name)
	return ""
}

// flagSample is the value the check gives a string flag without a default
// in NVIDIA's help: one of the form the flag takes.
func flagSample(name string) string {
	switch name {
	case "--mode":
		return "755"
	case "--host-driver-version":
		return "580.159.04"
	case "--host-cuda-version":
		return "12.8"
	case "--link":
		return "libcuda.so.1::/usr/lib/libcuda.so"
	case "--set":
		return "nvidia-container-cli.debug=/tmp/parity.log"
	case "--from", "--to":
		return "/run/nvidia/driver"
	case "--feature-flag", "--feature-flags", "--disable-hook", "--disable-hooks", "--enable-hook", "--enable-hooks":
		return "parity-probe"
	case "--config-mode":
		return "config-file"
	}
	return "/tmp/parity"
}

// goFlagSurface reads the -h usage of a program using Go's flag package
// with a Commands section (nvidia-container-runtime-hook).
func goFlagSurface(t *testing.T, tl string) []surfaceEntry {
	t.Helper()
	out := helpOf(t, tl, "-h")
	var entries []surfaceEntry
	inCommands := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "Commands:":
			inCommands = true
		case strings.HasPrefix(l, "  -"):
			f := strings.Fields(l)
			kind := "bool"
			if len(f) > 1 {
				kind = f[1]
			}
			sample := "/tmp/parity"
			if kind == "bool" {
				sample = "-"
			}
			entries = append(entries, surfaceEntry{tool: tl, what: "flag", kind: kind, name: f[0], sample: sample})
		case inCommands && strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "    "):
			entries = append(entries, surfaceEntry{tool: tl, path: strings.TrimSpace(l), what: "command"})
		}
	}
	return entries
}

// runtimeSurface: nvidia-container-runtime hands every argument to the
// low-level runtime; the one flag it acts on itself is the one that makes
// it print its own version first (found by trying the usual spellings).
func runtimeSurface(t *testing.T) []surfaceEntry {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, "/low-level-runtime", "#!/bin/sh\nexit 0\n", 0o755)
	write(t, dir, "/xdg/nvidia-container-runtime/config.toml", fmt.Sprintf("[nvidia-container-runtime]\nruntimes = [%q]\n", filepath.Join(dir, "low-level-runtime")), 0o644)
	var entries []surfaceEntry
	for _, f := range []string{"--version", "-version", "-v", "--help", "-h"} {
		cmd := exec.Command(filepath.Join(binDir, "nvidia-container-runtime"), f)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg")}
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "NVIDIA Container Runtime version") {
			entries = append(entries, surfaceEntry{tool: "nvidia-container-runtime", what: "flag", kind: "bool", name: f, sample: "-"})
		}
	}
	return entries
}

// helpOf runs NVIDIA's tool with args and returns its output.
func helpOf(t *testing.T, tl string, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, tl), args...).CombinedOutput()
	if err != nil && tl != "nvidia-container-runtime-hook" {
		t.Fatalf("%s %q: %v\n%s", tl, args, err, out)
	}
	return string(out)
}

// TestHelpCommand: `help` and its alias `h` print the help listing every
// command NVIDIA's lists (testdata/cli/surface.txt), as NVIDIA's do, for
// nvidia-ctk, a command group of it, and nvidia-cdi-hook.
func TestHelpCommand(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", surfaceFile))
	if err != nil {
		t.Fatal(err)
	}
	children := map[string][]string{} // "tool\tparent path" -> command names
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(line, "\t")
		if f[2] != "command" || f[1] == "help" || f[1] == "h" {
			continue
		}
		parent, name := "", f[1]
		if i := strings.LastIndex(f[1], " "); i >= 0 {
			parent, name = f[1][:i], f[1][i+1:]
		}
		children[f[0]+"\t"+parent] = append(children[f[0]+"\t"+parent], name)
	}
	for _, c := range []struct{ tool, parent string }{{"nvidia-ctk", ""}, {"nvidia-ctk", "cdi"}, {"nvidia-ctk", "system"}, {"nvidia-cdi-hook", ""}} {
		names := children[c.tool+"\t"+c.parent]
		if len(names) == 0 {
			t.Fatalf("%s %s: no commands in %s", c.tool, c.parent, surfaceFile)
		}
		for _, h := range []string{"help", "h"} {
			args := append(strings.Fields(c.parent), h)
			out, err := exec.Command(tool(t, c.tool), args...).CombinedOutput()
			if err != nil {
				t.Errorf("%s %s: %v\n%s", c.tool, strings.Join(args, " "), err, out)
				continue
			}
			for _, n := range names {
				if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(n) + `\b`).Match(out) {
					t.Errorf("%s %s does not list %s:\n%s", c.tool, strings.Join(args, " "), n, out)
				}
			}
		}
	}
}

// TestVersionFlags: each tool's version flags print a version line and
// exit 0, as NVIDIA's do (with -update: checked on NVIDIA's).
func TestVersionFlags(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "/low-level-runtime", "#!/bin/sh\necho 'runc version 1.1'\n", 0o755)
	write(t, dir, "/xdg/nvidia-container-runtime/config.toml", fmt.Sprintf("[nvidia-container-runtime]\nruntimes = [%q]\n", filepath.Join(dir, "low-level-runtime")), 0o644)
	for _, c := range []struct{ tool, flag string }{
		{"nvidia-ctk", "--version"}, {"nvidia-ctk", "-v"},
		{"nvidia-cdi-hook", "--version"}, {"nvidia-cdi-hook", "-v"},
		{"nvidia-container-runtime-hook", "-version"}, {"nvidia-container-runtime-hook", "--version"},
		{"nvidia-container-runtime", "--version"}, {"nvidia-container-runtime", "-version"},
	} {
		cmd := exec.Command(tool(t, c.tool), c.flag)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg")}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "version") {
			t.Errorf("%s %s: %v\n%s", c.tool, c.flag, err, out)
		}
	}
}
