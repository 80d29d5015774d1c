package nvc

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
)

func testOptions() []Option {
	return []Option{
		{Long: "debug", Short: 'd', Arg: RequiredArg},
		{Long: "load-kmods", Short: 'k'},
		{Long: "no-pivot", Short: 'n'},
		{Long: "user", Short: 'u', Arg: OptionalArg},
		{Long: "root", Short: 'r', Arg: RequiredArg},
		{Long: "ldcache", Short: 'l', Arg: RequiredArg},
		{Long: "no-create-imex-channels"},
		{Long: "compat32"},
		{Long: "compute"},
	}
}

func render(ps []Parsed) string {
	var parts []string
	for _, p := range ps {
		s := p.Name()
		if p.HasValue {
			s += "=" + p.Value
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestParse(t *testing.T) {
	tests := []struct {
		args     string
		inOrder  bool
		want     string
		operands string
		err      string
	}{
		{args: "--root=/run/nvidia/driver info --csv", inOrder: true, want: "root=/run/nvidia/driver", operands: "info --csv"},
		{args: "--root /drv -k list", inOrder: true, want: "root=/drv load-kmods", operands: "list"},
		{args: "-r/drv -kn info", inOrder: true, want: "root=/drv load-kmods no-pivot", operands: "info"},
		{args: "-knr /drv info", inOrder: true, want: "load-kmods no-pivot root=/drv", operands: "info"},
		{args: "-u info", inOrder: true, want: "user", operands: "info"},
		{args: "-u1000:1000 info", inOrder: true, want: "user=1000:1000", operands: "info"},
		{args: "--user info", inOrder: true, want: "user", operands: "info"},
		{args: "--user=65534 info", inOrder: true, want: "user=65534", operands: "info"},
		{args: "--ro=/x --ld /c --no-cr info", inOrder: true, want: "root=/x ldcache=/c no-create-imex-channels", operands: "info"},
		{args: "-- --root info", inOrder: true, operands: "--root info"},
		{args: "a --root=/x b", inOrder: false, want: "root=/x", operands: "a b"},
		{args: "a --root=/x b", inOrder: true, operands: "a --root=/x b"},
		{args: "--comp", err: "option '--comp' is ambiguous; possibilities: '--compat32' '--compute'"},
		{args: "--compat", want: "compat32"},
		{args: "--bogus", err: "unrecognized option '--bogus'"},
		{args: "-x", err: "invalid option -- 'x'"},
		{args: "--root", err: "option '--root' requires an argument"},
		{args: "-r", err: "option requires an argument -- 'r'"},
		{args: "--load-kmods=1", err: "option '--load-kmods' doesn't allow an argument"},
		{args: "- --", operands: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			ps, ops, err := Parse(testOptions(), strings.Fields(tt.args), tt.inOrder)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				if !isUsage(err) {
					t.Errorf("%T is not a usage error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := render(ps); got != tt.want {
				t.Errorf("options %q, want %q", got, tt.want)
			}
			if got := strings.Join(ops, " "); got != tt.operands {
				t.Errorf("operands %q, want %q", got, tt.operands)
			}
		})
	}
}

func TestParseGlobals(t *testing.T) {
	e := &app.Env{Environ: []string{"NVC_DEBUG_FILE=/tmp/from-env.log"}}
	g, action, rest, err := ParseGlobals(e, strings.Fields("nvidia-container-cli -k --root=/drv --ldcache=/etc/other.cache --no-create-imex-channels -u0:0 list -l"))
	if err != nil || action != RunCommand {
		t.Fatal(err, action)
	}
	want := Globals{Root: "/drv", LdCache: "/etc/other.cache", DebugFile: "/tmp/from-env.log", LoadKmods: true,
		NoCreateIMEXChannels: true, User: &Identity{0, 0}}
	if fmt.Sprintf("%+v %+v", *g.User, g) == "" || g.Root != want.Root || g.LdCache != want.LdCache || g.DebugFile != want.DebugFile ||
		!g.LoadKmods || !g.NoCreateIMEXChannels || g.NoPivot || *g.User != *want.User {
		t.Errorf("globals %+v (user %+v)", g, g.User)
	}
	if strings.Join(rest, " ") != "list -l" {
		t.Errorf("rest %q", rest)
	}
	g, _, _, _ = ParseGlobals(e, []string{"nvidia-container-cli", "--debug=/tmp/x.log", "info"})
	if g.DebugFile != "/tmp/x.log" {
		t.Errorf("--debug does not override NVC_DEBUG_FILE: %q", g.DebugFile)
	}
	g, _, _, _ = ParseGlobals(&app.Env{}, []string{"nvidia-container-cli", "info"})
	if g.Root != "/" || g.LdCache != "/etc/ld.so.cache" || g.User != nil {
		t.Errorf("defaults %+v", g)
	}
	for args, want := range map[string]Action{"-V": ShowVersion, "--version": ShowVersion, "--help": ShowHelp, "-?": ShowHelp, "--usage": ShowUsage} {
		if _, a, _, err := ParseGlobals(&app.Env{}, []string{"x", args}); err != nil || a != want {
			t.Errorf("%s: action %v err %v, want %v", args, a, err, want)
		}
	}
	if _, _, _, err := ParseGlobals(&app.Env{}, []string{"x", "--user=no-such-user-nctk", "info"}); err == nil || !isUsage(err) {
		t.Errorf("unknown user: %v", err)
	}
	if _, _, _, err := ParseGlobals(&app.Env{}, []string{"x", "--root=", "info"}); err == nil {
		t.Error("empty root accepted")
	}
}

func TestParseUser(t *testing.T) {
	tests := []struct {
		in    string
		given bool
		want  Identity
		err   bool
	}{
		{in: "1000:1001", given: true, want: Identity{1000, 1001}},
		{in: "root", given: true, want: Identity{0, 0}},
		{in: "0:root", given: true, want: Identity{0, 0}},
		{in: "4242", given: true, want: Identity{4242, 4242}}, // unknown uid: group defaults to the uid
		{in: "", given: false, want: Identity{uint32(os.Geteuid()), uint32(os.Getegid())}},
		{in: "nctk-no-such-user", given: true, err: true},
		{in: "0:nctk-no-such-group", given: true, err: true},
	}
	for _, tt := range tests {
		got, err := parseUser(tt.in, tt.given)
		if (err != nil) != tt.err || (!tt.err && got != tt.want) {
			t.Errorf("parseUser(%q, %v) = %+v, %v; want %+v (error %v)", tt.in, tt.given, got, err, tt.want, tt.err)
		}
	}
}

func TestGlogHandler(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(NewGlogHandler(&b)).With("root", "/drv")
	log.Info("selecting library", "path", "/usr/lib/libcuda.so.535")
	log.Warn("missing library libnvidia-ngx.so")
	log.WithGroup("g").Error("boom", "why", "two words")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	pid := fmt.Sprint(os.Getpid())
	pats := []string{
		`^I\d{4} \d\d:\d\d:\d\d\.\d{6} ` + pid + ` argp_test\.go:\d+\] selecting library root=/drv path=/usr/lib/libcuda\.so\.535$`,
		`^W\d{4} \d\d:\d\d:\d\d\.\d{6} ` + pid + ` argp_test\.go:\d+\] missing library libnvidia-ngx\.so root=/drv$`,
		`^E\d{4} .* boom root=/drv g\.why="two words"$`,
	}
	for i, p := range pats {
		if !regexp.MustCompile(p).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], p)
		}
	}
}

func TestOpenLog(t *testing.T) {
	path := t.TempDir() + "/debug.log"
	g := &Globals{DebugFile: path}
	log, closeLog, err := g.OpenLog()
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello")
	closeLog()
	data, _ := os.ReadFile(path)
	if !strings.Contains(string(data), "-- WARNING, the following logs are for debugging purposes only --") || !strings.Contains(string(data), "] hello") {
		t.Errorf("debug log:\n%s", data)
	}
	if _, _, err := (&Globals{DebugFile: "/nonexistent/dir/log"}).OpenLog(); err == nil {
		t.Error("no error for an unwritable debug log")
	}
}

func TestDiscoverOptions(t *testing.T) {
	e := &app.Env{Environ: []string{"PATH=/opt/bin:relative:/usr/bin", "CUDA_MPS_PIPE_DIRECTORY=/var/mps", "NCTK_PROBE_CACHE_DIR=/tmp/c", "NCTK_PROBE_CACHE=off"}}
	g := &Globals{Root: "/drv", LdCache: "/etc/ld.so.cache"}
	o := g.DiscoverOptions(e, nil)
	if o.Root != "/drv" || o.MPSPipeDir != "/var/mps" || o.ProbeConfig.CacheDir != "/tmp/c" || !o.ProbeConfig.NoCache {
		t.Errorf("options %+v", o)
	}
	want := "/opt/bin /usr/bin /usr/local/sbin /usr/local/bin /usr/sbin /sbin /bin /usr/local/nvidia/bin /usr/lib/nvidia/current"
	if got := strings.Join(o.SearchPath, " "); got != want {
		t.Errorf("search path\n got %s\nwant %s", got, want)
	}
}

// FuzzParse: any argument vector is either parsed or rejected with a usage
// error; it never panics, and every parsed option is one of the table's.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"--root=/x info", "-knr /drv list -l", "-u", "--user=1:2 -- x", "--comp", "-r", "--=x", "-", "--", "-\x00"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, line string, inOrder bool) {
		args := strings.Split(line, " ")
		ps, ops, err := Parse(testOptions(), args, inOrder)
		if err != nil {
			if !isUsage(err) {
				t.Fatalf("non-usage error %T: %v", err, err)
			}
			return
		}
		if len(ps)+len(ops) > len(args)*len(line)+1 {
			t.Fatalf("%d options and %d operands from %d arguments", len(ps), len(ops), len(args))
		}
		for _, p := range ps {
			if p.Opt == nil || (p.Opt.Arg == NoArg && p.HasValue) {
				t.Fatalf("bad parsed option %+v", p)
			}
		}
	})
}

// isUsage reports whether err is a command-line error.
func isUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}
