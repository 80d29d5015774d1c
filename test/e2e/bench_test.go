package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/runtime"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/planner"
)

// BenchmarkCreate measures what a GPU request adds to `create`: in each
// iteration, in an order that alternates, the same bundle is created (and
// deleted) by
//
//	runc          plain `runc create` of the original config.json;
//	nvidia        `nvidia-container-runtime create` (fixture driver with 4
//	              GPUs, NVIDIA_VISIBLE_DEVICES=all, default capabilities),
//	              which edits config.json and execs runc;
//	edited        `runc create` of the spec nvidia-container-runtime wrote
//	              (devices, mounts, createContainer hooks): what runc and
//	              the hooks cost, without the wrapper;
//	edited-nohook the same spec without its createContainer hooks: what the
//	              device nodes and bind mounts cost runc;
//	edited-no-<h> the same spec without hook <h>: the cost of that hook;
//	hook          `runc create` of the original config.json with the
//	              prestart hook `docker run --gpus` adds
//	              (nvidia-container-runtime-hook, which runs
//	              nvidia-container-cli configure, in process as both are
//	              nctk): the legacy path.
//
// Metrics (ms, medians over iterations; extra-* are per-iteration paired
// differences nvidia − runc):
//
//	runc-ms, nvidia-ms, extra-ms, extra-p90-ms
//	hook-extra-ms  median of the paired differences hook − runc
//	wrapper-ms     nvidia − edited: exec of nctk, config, discovery, plan,
//	               spec write
//	hooks-ms       edited − edited-nohook
//	mounts-ms      edited-nohook − runc
//	hook-<h>-ms    edited − edited-no-<h>
//
// and, measured in this process, the wrapper's steps: discover-ms (driver
// discovery over the fixture root), prepare-ms (planner.Prepare: request,
// image layout, discovery, selection, plan), write-ms (load
// config.json, apply the plan, write it atomically) and inproc-ms (the
// wrapper's whole Run up to the exec of runc: config.toml, arguments, all of
// the above). wrapper-ms − inproc-ms is process start-up and the exec.
//
// Run: go test ./test/e2e -run '^$' -bench BenchmarkCreate -benchtime 50x
func BenchmarkCreate(b *testing.B) {
	skipShort(b)
	e2e.RequireRoot(b)
	runc := e2e.RequireTool(b, "runc")
	host := newHost(b, fixture.Spec{Layout: "multiarch", GPUs: 4})
	image := e2e.BuildRootfs(b, e2e.RootfsOptions{NoCudaprobe: true})
	bundle := e2e.MakeBundle(b, image, "/bin/true")
	e2e.EditSpec(b, bundle, func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all")
	})
	specPath := filepath.Join(bundle, "config.json")
	orig := readFile(b, specPath)
	state := filepath.Join(e2e.TempDir(b, "state"), "runc")
	// Whatever a failed iteration left: the containers and their cgroups.
	b.Cleanup(func() {
		out, _ := exec.Command(runc, "--root", state, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
		}
	})
	wrapper := tool(b, "nvidia-container-runtime")
	// config.toml as installed (info level, no debug log), pointing at the
	// fixture driver.
	cfgPath := filepath.Join(host.Dir, "bench.toml")
	cfg := fmt.Sprintf("[nvidia-container-cli]\nroot = %q\npath = %q\nldconfig = \"@/sbin/ldconfig\"\nload-kmods = false\n\n"+
		"[nvidia-container-runtime]\nruntimes = [%q]\n", host.Root.Path, tool(b, "nvidia-container-cli"), runc)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	cfgEnv := []string{"NVIDIA_CTK_CONFIG_FILE_PATH=" + cfgPath}
	env := append(os.Environ(), cfgEnv...)

	// The spec the wrapper writes, and its variants.
	run := fileRunner(b)
	c := exec.Command(wrapper, "--root", state, "create", "--bundle", bundle, "nctk-bench-probe")
	c.Env = env
	if err := run(c); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(runc, "--root", state, "delete", "--force", "nctk-bench-probe").CombinedOutput(); err != nil {
		b.Fatalf("delete: %v\n%s", err, out)
	}
	edited := readFile(b, specPath)
	variants := map[string][]byte{"edited": edited, "edited-nohook": withoutHooks(b, edited, nil),
		"hook": withPrestartHook(b, orig, tool(b, "nvidia-container-runtime-hook"), cfgPath)}
	hookNames := hookSubcommands(b, edited)
	for _, h := range hookNames {
		variants["edited-no-"+h] = withoutHooks(b, edited, &h)
	}

	create := func(bin string, spec []byte, id string, env []string) time.Duration {
		if err := os.WriteFile(specPath, spec, 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin, "--root", state, "create", "--bundle", bundle, id)
		cmd.Env = env
		start := time.Now()
		err := run(cmd)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command(runc, "--root", state, "delete", "--force", id).CombinedOutput(); err != nil {
			b.Fatalf("delete %s: %v\n%s", id, err, out)
		}
		return d
	}
	names := []string{"runc", "nvidia"}
	for n := range variants {
		names = append(names, n)
	}
	slices.Sort(names[2:])
	times := map[string][]time.Duration{}
	var extra, hookExtra []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		order := slices.Clone(names)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]time.Duration{}
		for _, n := range order {
			id := fmt.Sprintf("nctk-bench-%d-%s", i, n)
			switch n {
			case "runc":
				got[n] = create(runc, orig, id, os.Environ())
			case "nvidia":
				got[n] = create(wrapper, orig, id, env)
			default:
				got[n] = create(runc, variants[n], id, os.Environ())
			}
			times[n] = append(times[n], got[n])
		}
		extra = append(extra, got["nvidia"]-got["runc"])
		hookExtra = append(hookExtra, got["hook"]-got["runc"])
	}
	b.StopTimer()
	if err := os.WriteFile(specPath, orig, 0o644); err != nil {
		b.Fatal(err)
	}
	med := func(n string) time.Duration { return percentile(times[n], 50) }
	b.ReportMetric(ms(med("runc")), "runc-ms")
	b.ReportMetric(ms(med("nvidia")), "nvidia-ms")
	b.ReportMetric(ms(percentile(extra, 50)), "extra-ms")
	b.ReportMetric(ms(percentile(extra, 90)), "extra-p90-ms")
	b.ReportMetric(ms(percentile(hookExtra, 50)), "hook-extra-ms")
	b.ReportMetric(ms(med("nvidia")-med("edited")), "wrapper-ms")
	b.ReportMetric(ms(med("edited")-med("edited-nohook")), "hooks-ms")
	b.ReportMetric(ms(med("edited-nohook")-med("runc")), "mounts-ms")
	for _, h := range hookNames {
		b.ReportMetric(ms(med("edited")-med("edited-no-"+h)), "hook-"+h+"-ms")
	}
	steps := wrapperSteps(b, cfgPath, cfgEnv, orig, image, 20)
	for _, s := range []string{"discover", "prepare", "write", "inproc"} {
		b.ReportMetric(ms(steps[s]), s+"-ms")
	}
}

// wrapperSteps times the wrapper's own steps in this process (medians of n
// runs): discovery, the whole plan (request, discovery, selection, plan),
// and loading, editing and atomically writing config.json, and the
// wrapper's whole Run with the exec of runc stubbed out.
func wrapperSteps(b *testing.B, cfgPath string, env []string, spec []byte, rootfs string, n int) map[string]time.Duration {
	cfg, err := config.LoadFile(cfgPath, true)
	if err != nil {
		b.Fatal(err)
	}
	doc, err := ocispec.Parse("config.json", spec)
	if err != nil {
		b.Fatal(err)
	}
	var disc, prep, write, whole []time.Duration
	// A second bundle (same absolute root.path) for the spec writes.
	scratch := filepath.Join(e2e.TempDir(b, "scratch"), "config.json")
	for range n {
		job, _, err := planner.SpecJob(doc.Spec(), rootfs, cfg)
		if err != nil || job == nil {
			b.Fatalf("SpecJob: %v", err)
		}
		start := time.Now()
		if _, err := discover.Discover(job.Driver); err != nil {
			b.Fatal(err)
		}
		disc = append(disc, time.Since(start))

		start = time.Now()
		res, _, err := planner.Prepare(context.Background(), doc.Spec(), rootfs, cfg)
		if err != nil {
			b.Fatal(err)
		}
		prep = append(prep, time.Since(start))

		if err := os.WriteFile(scratch, spec, 0o644); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		d, err := ocispec.Load(scratch)
		if err == nil {
			err = ocispec.Apply(d, res.Plan, ocispec.HookConfig{Path: tool(b, "nvidia-cdi-hook"), LdconfigPath: "/sbin/ldconfig"})
		}
		if err == nil {
			err = ocispec.Save(scratch, d)
		}
		write = append(write, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}

		// The whole wrapper in this process, up to the exec of runc:
		// config.toml, argument parsing, planning, the spec edit and write.
		if err := os.WriteFile(scratch, spec, 0o644); err != nil {
			b.Fatal(err)
		}
		rt := runtime.New()
		rt.Exec = func(string, []string, []string) error { return nil }
		var stderr strings.Builder
		e := &app.Env{
			Args:    []string{tool(b, "nvidia-container-runtime"), "create", "--bundle", filepath.Dir(scratch), "x"},
			Stdin:   strings.NewReader(""),
			Stdout:  io.Discard,
			Stderr:  &stderr,
			Environ: append(os.Environ(), env...),
		}
		start = time.Now()
		code := rt.Run(e)
		whole = append(whole, time.Since(start))
		if code != 0 {
			b.Fatalf("runtime: exit %d: %s", code, stderr.String())
		}
	}
	return map[string]time.Duration{
		"discover": percentile(disc, 50),
		"prepare":  percentile(prep, 50),
		"write":    percentile(write, 50),
		"inproc":   percentile(whole, 50),
	}
}

// withPrestartHook returns spec with the prestart hook dockerd adds for
// `docker run --gpus`: nvidia-container-runtime-hook prestart (here with
// -config naming the benchmark's config.toml).
func withPrestartHook(b *testing.B, spec []byte, hook, cfg string) []byte {
	var s specs.Spec
	if err := json.Unmarshal(spec, &s); err != nil {
		b.Fatal(err)
	}
	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	//lint:ignore SA1019 prestart is where dockerd puts this hook
	s.Hooks.Prestart = append(s.Hooks.Prestart, specs.Hook{
		Path: hook, Args: []string{"nvidia-container-runtime-hook", "-config", cfg, "prestart"},
		Env: []string{"PATH=" + e2e.SystemPath},
	})
	out, err := json.Marshal(&s)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// hookSubcommands lists the nvidia-cdi-hook subcommands of the spec's
// createContainer hooks (a hook may chain several, separated by ";").
func hookSubcommands(b *testing.B, spec []byte) []string {
	var s specs.Spec
	if err := json.Unmarshal(spec, &s); err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, seg := range hookSegments(s) {
		if !slices.Contains(names, seg[0]) {
			names = append(names, seg[0])
		}
	}
	return names
}

// withoutHooks returns spec without its createContainer hooks (all of
// them), or without the invocations of subcommand *only in them.
func withoutHooks(b *testing.B, spec []byte, only *string) []byte {
	var s specs.Spec
	if err := json.Unmarshal(spec, &s); err != nil {
		b.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(spec, &doc); err != nil {
		b.Fatal(err)
	}
	hooks, _ := doc["hooks"].(map[string]any)
	if hooks == nil || s.Hooks == nil {
		return spec
	}
	var keep []specs.Hook
	if only != nil {
		for _, h := range s.Hooks.CreateContainer {
			args := []string{h.Args[0]}
			var seg []string
			for _, a := range append(h.Args[1:], ";") {
				if a != ";" {
					seg = append(seg, a)
					continue
				}
				if len(seg) > 0 && seg[0] != *only {
					if len(args) > 1 {
						args = append(args, ";")
					}
					args = append(args, seg...)
				}
				seg = nil
			}
			if len(args) > 1 {
				h.Args = args
				keep = append(keep, h)
			}
		}
	}
	if len(keep) == 0 {
		delete(hooks, "createContainer")
	} else {
		hooks["createContainer"] = keep
	}
	out, err := json.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

// medianCI returns a distribution-free 95% confidence interval of the
// median of ds: the order statistics j and k (1-based) of the sorted
// samples with j = ⌊n/2 − 0.98√n⌋ and k = ⌈n/2 + 1 + 0.98√n⌉, clamped to
// the samples (the normal approximation of the binomial count of samples
// below the median). With few samples (7 or fewer) it is every sample's
// range.
func medianCI(ds []time.Duration) (lo, hi time.Duration) {
	n := len(ds)
	if n == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	half := 0.98 * math.Sqrt(float64(n))
	j := int(math.Floor(float64(n)/2 - half))
	k := int(math.Ceil(float64(n)/2 + 1 + half))
	j = max(j, 1)
	k = min(k, n)
	return s[j-1], s[k-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// fileRunner returns a function that runs a command with its stdout and
// stderr in a log file (emptied before each run) and returns an error
// holding the log when it fails. A created container keeps the stdio it was
// given until it starts or dies: the runtimes write to a file, not to a pipe
// create would never close.
func fileRunner(b *testing.B) func(*exec.Cmd) error {
	b.Helper()
	logPath := filepath.Join(e2e.TempDir(b, "log"), "create.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logFile.Close() })
	return func(cmd *exec.Cmd) error {
		if err := logFile.Truncate(0); err != nil {
			return err
		}
		if _, err := logFile.Seek(0, 0); err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Run(); err != nil {
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s: %w\n%s", cmd.Args, err, out)
		}
		return nil
	}
}
