package discover

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/fixture"
	"golang.org/x/sys/unix"
)

// renamingHandler is a slog handler that renames the driver root away at
// the first record whose message is awayAt and back at the first record
// whose message is backAt: a driver root swapped in the middle of one
// discovery, at a chosen step.
type renamingHandler struct {
	t              *testing.T
	root, away     string
	awayAt, backAt string
	isAway, wasSet bool
}

func (h *renamingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *renamingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *renamingHandler) WithGroup(string) slog.Handler            { return h }
func (h *renamingHandler) Handle(_ context.Context, r slog.Record) error {
	switch {
	case r.Message == h.awayAt && !h.isAway && !h.wasSet:
		if err := os.Rename(h.root, h.away); err != nil {
			h.t.Fatal(err)
		}
		h.isAway, h.wasSet = true, true
	case r.Message == h.backAt && h.isAway:
		if err := os.Rename(h.away, h.root); err != nil {
			h.t.Fatal(err)
		}
		h.isAway = false
	}
	return nil
}

// TestDiscoverReadsOneRoot: a driver root renamed away in the middle of a
// discovery (after the ld.so.cache was read, while its entries are
// resolved) and back before it ends used to give a driver with some or
// all libraries and binaries missing, silently. Discovery reads the root
// through the descriptor it opened first, so the result is exactly a
// stable discovery's, with host paths; Verify then passes once the root
// is back and names the root while it is away.
func TestDiscoverReadsOneRoot(t *testing.T) {
	for _, layout := range []fixture.Layout{fixture.Multiarch, fixture.Debian, fixture.GKE} {
		t.Run(string(layout), func(t *testing.T) {
			fx := fixture.Build(t, fixture.Spec{Layout: layout, GPUs: 2})
			want, err := Discover(Options{Root: fx.Path})
			if err != nil {
				t.Fatal(err)
			}
			if len(want.Libraries) < 5 || len(want.Binaries) < 2 {
				t.Fatalf("stable discovery found %d libraries, %d binaries", len(want.Libraries), len(want.Binaries))
			}
			for _, tc := range []struct{ name, awayAt, backAt string }{
				{"away while libraries resolve, back at the binaries", "selecting library", "selecting binary"},
				{"away from the binaries to the end", "selecting binary", ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					h := &renamingHandler{t: t, root: fx.Path, away: fx.Path + ".away", awayAt: tc.awayAt, backAt: tc.backAt}
					got, err := Discover(Options{Root: fx.Path, Logger: slog.New(h)})
					if !h.wasSet {
						t.Fatalf("no %q record: the root was never renamed", tc.awayAt)
					}
					if err != nil {
						t.Fatalf("Discover with the root renamed away mid-way: %v", err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("Discover with the root renamed away mid-way differs from a stable one:\n got %d libraries %d binaries %d GPUs, warnings %q\nwant %d libraries %d binaries %d GPUs, warnings %q",
							len(got.Libraries), len(got.Binaries), len(got.GPUs), got.Warnings,
							len(want.Libraries), len(want.Binaries), len(want.GPUs), want.Warnings)
					}
					if h.isAway {
						err := got.Verify(nil)
						var dc *DriverChangedError
						if !errors.As(err, &dc) || dc.Path != fx.Path || !strings.Contains(err.Error(), "vanished") {
							t.Errorf("Verify with the root away = %v, want a DriverChangedError naming %s", err, fx.Path)
						}
						if err := os.Rename(h.away, fx.Path); err != nil {
							t.Fatal(err)
						}
					}
					if err := got.Verify(hostPaths(got)); err != nil {
						t.Errorf("Verify with the root back: %v", err)
					}
				})
			}
		})
	}
}

// hostPaths are the host paths of d's files and nodes.
func hostPaths(d *Driver) []string {
	var out []string
	for _, fs := range [][]File{d.Libraries, d.Binaries, d.Firmware, d.IPCs} {
		for _, f := range fs {
			out = append(out, f.HostPath)
		}
	}
	for _, n := range d.ControlNodes {
		out = append(out, n.HostPath)
	}
	for _, g := range d.GPUs {
		out = append(out, g.Node.HostPath)
	}
	return out
}

// TestPinnedPathsNeverShow: results, warnings and errors of a discovery
// name host paths, never the descriptor paths it reads through.
func TestPinnedPathsNeverShow(t *testing.T) {
	fx := fixture.Build(t, fixture.Spec{GPUs: 1})
	if err := os.Remove(filepath.Join(fx.Path, "dev/nvidia-uvm")); err != nil {
		t.Fatal(err)
	}
	d, err := Discover(Options{Root: fx.Path, SearchPath: []string{"/usr/bin", "/nonexistent"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(append(hostPaths(d), d.Warnings...), "\n"); strings.Contains(s, "/proc/self/fd") ||
		!strings.Contains(s, fx.Path+"/") {
		t.Errorf("results name descriptor paths or not the root:\n%s", s)
	}
	if len(d.Warnings) == 0 {
		t.Error("no warning about the missing /dev/nvidia-uvm")
	}
	// An error deep in a step, and a typed error's wrapped cause.
	info := filepath.Join(fx.Path, fx.GPUs[0].ProcDir, "information")
	if err := os.Remove(info); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(info, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Discover(Options{Root: fx.Path})
	if err == nil || strings.Contains(err.Error(), "/proc/self/fd") || !strings.Contains(err.Error(), info) {
		t.Errorf("error %v: want it to name %s and no descriptor path", err, info)
	}
	version := filepath.Join(fx.Path, "proc/driver/nvidia/version")
	if err := os.Remove(version); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(version, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Discover(Options{Root: fx.Path})
	var nd *NoDriverError
	if !errors.As(err, &nd) || nd.Path != version || strings.Contains(nd.Error(), "/proc/self/fd") {
		t.Errorf("error %v: want a NoDriverError naming %s and no descriptor path", err, version)
	}
}

// TestVerify: every change Verify is for is reported with what changed;
// a stable driver passes.
func TestVerify(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, root string, d *Driver)
		path   func(root string, d *Driver) string // "" for no error
		reason string
	}{
		{name: "stable"},
		{
			name: "root renamed away",
			change: func(t *testing.T, root string, _ *Driver) {
				mustRename(t, root, root+".away")
			},
			path:   func(root string, _ *Driver) string { return root },
			reason: "vanished: no such file or directory",
		},
		{
			name: "root replaced by another directory",
			change: func(t *testing.T, root string, _ *Driver) {
				mustRename(t, root, root+".old")
				if err := os.Mkdir(root, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			path:   func(root string, _ *Driver) string { return root },
			reason: "was replaced",
		},
		{
			name: "another kernel module loaded",
			change: func(t *testing.T, root string, d *Driver) {
				p := filepath.Join(root, "proc/driver/nvidia/version")
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), d.Version, "999.10.01")), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			path:   func(root string, _ *Driver) string { return filepath.Join(root, "proc/driver/nvidia/version") },
			reason: "now says kernel module 999.10.01",
		},
		{
			// On procfs discovery records the module's load and Verify
			// compares it (no second read of the version file); a
			// load that is not the current one is a change.
			name: "another load of the kernel module",
			change: func(t *testing.T, root string, d *Driver) {
				if d.ident.load != "" {
					t.Fatalf("a fixture root (no procfs) recorded a module load %q", d.ident.load)
				}
				d.ident.load = "boot 00000000-0000-0000-0000-000000000000 load 0.1"
			},
			path:   func(root string, _ *Driver) string { return filepath.Join(root, "proc/driver/nvidia/version") },
			reason: "another load of the kernel module",
		},
		{
			name: "a planned library removed",
			change: func(t *testing.T, _ string, d *Driver) {
				if err := os.Remove(d.Libraries[0].HostPath); err != nil {
					t.Fatal(err)
				}
			},
			path:   func(_ string, d *Driver) string { return d.Libraries[0].HostPath },
			reason: "vanished",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := fixture.Build(t, fixture.Spec{GPUs: 1})
			d, err := Discover(Options{Root: fx.Path})
			if err != nil {
				t.Fatal(err)
			}
			if tc.change != nil {
				tc.change(t, fx.Path, d)
			}
			err = d.Verify(hostPaths(d))
			if tc.path == nil {
				if err != nil {
					t.Fatalf("Verify on a stable driver: %v", err)
				}
				return
			}
			var dc *DriverChangedError
			if !errors.As(err, &dc) {
				t.Fatalf("Verify = %v, want a *DriverChangedError", err)
			}
			if want := tc.path(fx.Path, d); dc.Path != want || !strings.Contains(dc.Reason, tc.reason) || dc.Root != fx.Path {
				t.Errorf("Verify = %v, want it to name %s: %s", err, want, tc.reason)
			}
		})
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(to) })
}

// TestCheckLibraries: each capability's essential library must be there
// (64-bit); the others may be missing.
func TestCheckLibraries(t *testing.T) {
	lib := func(name string, compat32 bool) File {
		return File{Name: name, Path: "/usr/lib/" + name + ".535.261.03", Compat32: compat32}
	}
	full := []File{lib("libnvidia-ml.so", false), lib("libcuda.so", false), lib("libnvidia-ptxjitcompiler.so", false)}
	tests := []struct {
		name    string
		libs    []File
		caps    caps.Set
		missing []string
	}{
		{"all there", full, caps.Default(), nil},
		{"no libcuda, compute asked for", full[:1], caps.Default(), []string{"libcuda.so"}},
		{"no libcuda, utility only", full[:1], caps.Set{caps.Utility: true}, nil},
		{"no libnvidia-ml, compute only", full[1:], caps.Set{caps.Compute: true}, nil},
		{"nothing, utility and compute", nil, caps.Default(), []string{"libnvidia-ml.so", "libcuda.so"}},
		{"only 32-bit ones", []File{lib("libnvidia-ml.so", true), lib("libcuda.so", true)}, caps.Default(), []string{"libnvidia-ml.so", "libcuda.so"}},
		{"video and graphics need none of them", nil, caps.Set{caps.Video: true, caps.Graphics: true}, nil},
		{"libcuda only of another driver", full[:1], caps.Default(), []string{"libcuda.so"}},
	}
	other := "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &Driver{Root: "/run/nvidia/driver", Version: "535.261.03", Libraries: tc.libs}
			if strings.Contains(tc.name, "another driver") {
				d.otherVersion = map[string]string{"libcuda.so": other}
			}
			err := d.CheckLibraries(tc.caps)
			var got []string
			for _, e := range unjoin(err) {
				var m *MissingLibraryError
				if !errors.As(e, &m) {
					t.Fatalf("error %v is not a *MissingLibraryError", e)
				}
				got = append(got, m.Name)
				for _, s := range []string{m.Name, "535.261.03", "/run/nvidia/driver/etc/ld.so.cache", "/run/nvidia/driver"} {
					if !strings.Contains(e.Error(), s) {
						t.Errorf("error %q lacks %q", e, s)
					}
				}
			}
			if !reflect.DeepEqual(got, tc.missing) {
				t.Errorf("missing %q, want %q", got, tc.missing)
			}
			if d.otherVersion != nil && (err == nil || !strings.Contains(err.Error(), other+", of driver 550.54.15")) {
				t.Errorf("error %v does not name the other driver's %s", err, other)
			}
		})
	}
}

// unjoin returns the errors errors.Join joined (err itself for another
// error, none for nil).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestUnpin: descriptor paths in messages become host paths; another
// descriptor's are left alone.
func TestUnpin(t *testing.T) {
	p := &pinned{path: "/run/nvidia/driver", sys: "/proc/self/fd/5", fd: 5}
	for in, want := range map[string]string{
		"open /proc/self/fd/5/proc/driver/nvidia/version: no such file": "open /run/nvidia/driver/proc/driver/nvidia/version: no such file",
		"a: /proc/self/fd/5/x, b: /proc/self/fd/5/y":                    "a: /run/nvidia/driver/x, b: /run/nvidia/driver/y",
		"stat /proc/self/fd/5":                                          "stat /run/nvidia/driver",
		"open /proc/self/fd/50/x and /proc/self/fd/15":                  "open /proc/self/fd/50/x and /proc/self/fd/15",
	} {
		if got := p.unpin(in); got != want {
			t.Errorf("unpin(%q) = %q, want %q", in, got, want)
		}
	}
	root := &pinned{path: "/", sys: "/", fd: -1}
	if got := root.unpin("open /proc/self/fd/5/x"); got != "open /proc/self/fd/5/x" {
		t.Errorf("an unpinned root rewrote %q", got)
	}
}

// TestRootNotOpened: a driver, dev or proc root that cannot be opened
// stops discovery at once with a *NoDriverError naming that root. Read by
// name instead (as before), a root renamed away while it was opened and
// back a moment later was read in part: the libraries found, their ELF
// headers not, and a create went on with a plan missing the SONAME links.
func TestRootNotOpened(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]Options{
		"missing root":      {Root: filepath.Join(dir, "away")},
		"root is a file":    {Root: file},
		"missing dev root":  {Root: dir, DevRoot: filepath.Join(dir, "nodev")},
		"missing proc root": {Root: dir, ProcRoot: filepath.Join(dir, "noproc")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Discover(opts)
			var e *NoDriverError
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *NoDriverError", err, err)
			}
			// The version file below the root or proc root (as NVIDIA's
			// message names it), the dev root itself.
			want := opts.Root + "/proc/driver/nvidia/version"
			switch {
			case opts.DevRoot != "":
				want = opts.DevRoot
			case opts.ProcRoot != "":
				want = opts.ProcRoot + "/proc/driver/nvidia/version"
			}
			if e.Path != want || !strings.Contains(err.Error(), "under root "+opts.Root+": "+want+": ") {
				t.Errorf("error %q names %s, want %s", err, e.Path, want)
			}
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
				t.Errorf("error %v does not wrap why the root could not be opened", err)
			}
		})
	}
}
