package planner

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/driverprobe"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/request"
	"github.com/nctk/nctk/internal/requirements"
)

func TestMain(m *testing.M) {
	if driverprobe.MaybeRunChild(os.Args) {
		return
	}
	os.Exit(m.Run())
}

// cudaImageRequirement is NVIDIA_REQUIRE_CUDA of a CUDA 12.2 image: CUDA
// 12.2, or one of the listed brands on a 470/525 driver.
const cudaImageRequirement = "cuda>=12.2 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 " +
	"brand=nvidia,driver>=470,driver<471 brand=tesla,driver>=525,driver<526 brand=geforce,driver>=525,driver<526"

// debianTarget is the layout of Debian-family x86-64 images.
func debianTarget() plan.Target {
	return plan.Target{LibDir: "/usr/lib/x86_64-linux-gnu", Lib32Dir: "/usr/lib/i386-linux-gnu", BinDir: "/usr/bin"}
}

func TestRun(t *testing.T) {
	root := fixture.Build(t, fixture.Spec{Layout: fixture.Multiarch, GPUs: 4})
	cache := t.TempDir()
	job := func(devs []string, reqs ...string) Job {
		return Job{
			Driver:  discover.Options{Root: root.Path, ProbeConfig: driverprobe.Config{CacheDir: cache}},
			Request: request.Request{Devices: devs, Caps: caps.Default(), Requirements: parsed(t, reqs...)},
			Target:  debianTarget(),
		}
	}
	tests := []struct {
		name    string
		job     Job
		gpus    []int
		phase   phase.Phase
		errText []string
		cuda    string
		probed  bool // the full probe (arch, brand) ran
	}{
		{name: "GPUs 1 and 3", job: job([]string{"1", "3"}), gpus: []int{1, 3}},
		{name: "all", job: job([]string{"all"}), gpus: []int{0, 1, 2, 3}},
		{name: "none", job: job(nil)},
		{name: "CUDA image requirement holds", job: job([]string{"0"}, cudaImageRequirement), gpus: []int{0}, cuda: "12.2"},
		{name: "newer CUDA than the driver", job: job([]string{"0"}, "cuda>=13.1"), phase: phase.Requirement,
			errText: []string{"requirement error: unsatisfied condition: cuda>=13.1", "12.2", root.Version, "please update your driver"}},
		{name: "brand needs the GPU", job: job([]string{"0"}, "cuda>=13.0 brand=tesla,driver>=535"), gpus: []int{0}, cuda: "12.2", probed: true},
		{name: "unknown device", job: job([]string{"7"}), phase: phase.Device, errText: []string{"device error: 7: unknown device"}},
		{name: "unknown device with a device requirement", job: job([]string{"7"}, "arch>=8.0"), phase: phase.Device, errText: []string{"device error: 7: unknown device"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Run(context.Background(), tc.job)
			if tc.phase != "" {
				var pe *phase.Error
				if !errors.As(err, &pe) || pe.Phase != tc.phase {
					t.Fatalf("Run error %v, want phase %s", err, tc.phase)
				}
				for _, s := range tc.errText {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if n := strings.Count(err.Error(), " error: "); n != 1 {
					t.Errorf("error %q names its phase %d times, want once", err, n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, g := range r.Selection.GPUs {
				got = append(got, g.Index)
			}
			if !slices.Equal(got, tc.gpus) {
				t.Errorf("selected GPUs %v, want %v", got, tc.gpus)
			}
			var nodes []string
			for _, d := range r.Plan.Devices {
				nodes = append(nodes, d.Path)
			}
			for _, g := range r.Selection.GPUs {
				if !slices.Contains(nodes, g.Node.Path) {
					t.Errorf("GPU %d node %s not in plan %v", g.Index, g.Node.Path, nodes)
				}
			}
			if n := len(nodes) - len(tc.gpus); n != 3 { // nvidiactl, nvidia-uvm, nvidia-uvm-tools
				t.Errorf("plan devices %v: want the selected GPUs and 3 control nodes", nodes)
			}
			// The fixture's GPUs cannot be reached, so the full probe shows
			// as a warning; the selection, made once, is of the driver's
			// GPUs as the probe left them.
			probed := slices.ContainsFunc(r.Driver.Warnings, func(w string) bool { return strings.HasPrefix(w, "architecture unknown for GPU") })
			if probed != tc.probed {
				t.Errorf("full probe ran: %v, want %v (warnings %q)", probed, tc.probed, r.Driver.Warnings)
			}
			for _, g := range r.Selection.GPUs {
				i := slices.IndexFunc(r.Driver.GPUs, func(d discover.GPU) bool { return d.Index == g.Index })
				if i < 0 || !reflect.DeepEqual(g, r.Driver.GPUs[i]) {
					t.Errorf("selected GPU %d differs from the driver's", g.Index)
				}
			}
			if tc.cuda != "" && r.Driver.CUDAVersion != tc.cuda {
				t.Errorf("CUDA version %q, want %q", r.Driver.CUDAVersion, tc.cuda)
			}
		})
	}
}

// TestRequirementProbeIsCached checks the hot path: a CUDA image's
// requirement is settled by the CUDA version alone, which is probed once and
// then read from the cache, even where cuInit cannot succeed.
func TestRequirementProbeIsCached(t *testing.T) {
	root := fixture.Build(t, fixture.Spec{Layout: fixture.GKE, GPUs: 2})
	j := Job{Driver: discover.Options{Root: root.Path, ProbeConfig: driverprobe.Config{CacheDir: t.TempDir()}},
		Request: request.Request{Devices: []string{"all"}, Caps: caps.Default(), Requirements: parsed(t, cudaImageRequirement)},
		Target:  debianTarget()}
	var sources []discover.Source
	for range 2 {
		r, err := Run(context.Background(), j)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, r.Driver.CUDAVersionSource)
	}
	if !slices.Equal(sources, []discover.Source{discover.SourceLibcuda, discover.SourceCache}) {
		t.Errorf("CUDA version sources %v, want libcuda then cache", sources)
	}
}

func TestNeedsDeviceFacts(t *testing.T) {
	f := requirements.Facts{CUDA: "12.2", Driver: "535.261.03"}
	tests := []struct {
		reqs []string
		want bool
	}{
		{[]string{"cuda>=12.0"}, false},
		{[]string{cudaImageRequirement}, false},
		{[]string{"cuda>=13.0 brand=tesla,driver>=535"}, true},
		{[]string{"arch>=8.0"}, true},
		{[]string{"cuda>=12.0", "arch>=8.0"}, true},
		{[]string{"cuda>=13.0"}, false},
		{[]string{"driver>=600 arch=9.0"}, true},
		{nil, false},
	}
	for _, tc := range tests {
		if got := needsDeviceFacts(parsed(t, tc.reqs...), f); got != tc.want {
			t.Errorf("needsDeviceFacts(%q) = %v, want %v", tc.reqs, got, tc.want)
		}
	}
}

func TestRunPhases(t *testing.T) {
	_, err := Run(context.Background(), Job{Driver: discover.Options{Root: t.TempDir()}})
	var pe *phase.Error
	var nd *discover.NoDriverError
	if !errors.As(err, &pe) || pe.Phase != phase.Initialization || !errors.As(err, &nd) {
		t.Errorf("no driver: %v, want an initialization error wrapping *discover.NoDriverError", err)
	}
	if !strings.HasPrefix(err.Error(), "initialization error: no NVIDIA driver found") {
		t.Errorf("no driver: %q, want NVIDIA's wording", err)
	}
	if got := DiscoveryPhase(errors.New("ld.so.cache: truncated")); got != phase.Detection {
		t.Errorf("DiscoveryPhase of another error = %s, want detection", got)
	}
}

// parsed parses requirement expressions, failing the test on a syntax
// error.
func parsed(t *testing.T, reqs ...string) []requirements.Expr {
	t.Helper()
	var out []requirements.Expr
	for _, r := range reqs {
		e, err := requirements.Parse(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// removingHandler is a slog handler that removes a file at the first
// record whose message is at: a driver file vanishing during a discovery,
// after it was selected.
type removingHandler struct {
	t    *testing.T
	at   string
	path string
	done bool
}

func (h *removingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *removingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *removingHandler) WithGroup(string) slog.Handler            { return h }
func (h *removingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.at && !h.done {
		if err := os.Remove(h.path); err != nil {
			h.t.Fatal(err)
		}
		h.done = true
	}
	return nil
}

// TestRunDriverFilesMustBeThere: a container is never planned without its
// driver. A host whose libcuda is listed in ld.so.cache but gone (a
// driver upgrade half done) fails a compute request, naming libcuda; a
// driver file that vanishes after discovery selected it fails the plan,
// naming the file, instead of handing on a path that is not there.
func TestRunDriverFilesMustBeThere(t *testing.T) {
	find := func(t *testing.T, root, name string) string {
		t.Helper()
		d, err := discover.Discover(discover.Options{Root: root})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range d.Libraries {
			if f.Name == name && !f.Compat32 {
				return f.HostPath
			}
		}
		t.Fatalf("fixture has no %s", name)
		return ""
	}
	run := func(root string, c caps.Set, log *slog.Logger) error {
		_, err := Run(context.Background(), Job{Driver: discover.Options{Root: root, Logger: log},
			Request: request.Request{Devices: []string{"all"}, Caps: c}, Target: debianTarget()})
		return err
	}

	t.Run("libcuda gone", func(t *testing.T) {
		fx := fixture.Build(t, fixture.Spec{GPUs: 1})
		if err := os.Remove(find(t, fx.Path, "libcuda.so")); err != nil {
			t.Fatal(err)
		}
		err := run(fx.Path, caps.Default(), nil)
		var pe *phase.Error
		var ml *discover.MissingLibraryError
		if !errors.As(err, &pe) || pe.Phase != phase.Initialization || !errors.As(err, &ml) || ml.Name != "libcuda.so" {
			t.Fatalf("Run = %v, want an initialization error wrapping a MissingLibraryError for libcuda.so", err)
		}
		if err := run(fx.Path, caps.Set{caps.Utility: true}, nil); err != nil {
			t.Errorf("a utility-only request needs no libcuda: %v", err)
		}
	})

	t.Run("a selected library vanishes", func(t *testing.T) {
		fx := fixture.Build(t, fixture.Spec{GPUs: 1})
		lib := find(t, fx.Path, "libnvidia-ptxjitcompiler.so")
		h := &removingHandler{t: t, at: "selecting binary", path: lib}
		err := run(fx.Path, caps.Default(), slog.New(h))
		if !h.done {
			t.Fatal("the library was never removed")
		}
		var dc *discover.DriverChangedError
		if !errors.As(err, &dc) || dc.Path != lib || !strings.Contains(err.Error(), "vanished") {
			t.Fatalf("Run = %v, want a DriverChangedError naming %s", err, lib)
		}
	})
}
