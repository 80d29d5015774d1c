package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/cli/runtime"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// BenchmarkCreateCDI measures the runtime's CDI mode as BenchmarkCreate
// measures its legacy mode: a bundle whose annotation
// cdi.k8s.io/nctk-bench asks for nvidia.com/gpu=all, from a spec that
// `nvidia-ctk cdi generate` wrote for a fixture driver with 1 and with 8
// GPUs, created (and deleted) in each iteration, in an order that
// alternates, by
//
//	runc      plain `runc create` of the original config.json;
//	own       `nvidia-container-runtime create` with nctk's default spec
//	          (one chained hook, which the runtime recognises as its own
//	          and does in the rootfs itself);
//	sep       the same with a spec written with --separate-hooks (NVIDIA's
//	          layout: create-symlinks, update-ldcache running the host's
//	          ldconfig, disable-device-node-modification);
//	base      only when $NCTK_BENCH_BASELINE_BIN names a directory with
//	          another nctk build (its nvidia-ctk, nvidia-cdi-hook and
//	          nvidia-container-runtime): that build's spec and runtime, for
//	          before/after comparisons in one run;
//	floor     `runc create` of the config.json the own path wrote, without
//	          its createContainer hooks: what the spec's mounts and device
//	          nodes cost runc itself.
//
// Metrics (ms, medians): <path>-ms, <path>-extra-ms (median of the paired
// differences path − runc), <path>-share-ms (path − floor: the wrapper and
// its hooks, nctk's own share), floor-ms. With strace installed, each path
// is also run once under `strace -f -c`: <path>-syscalls and <path>-execs
// (system calls and execve calls of the whole process tree of one create).
//
// Run: go test ./test/e2e -run '^$' -bench BenchmarkCreateCDI -benchtime 40x
func BenchmarkCreateCDI(b *testing.B) {
	for _, gpus := range []int{1, 8} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) { benchCreateCDI(b, gpus) })
	}
}

func benchCreateCDI(b *testing.B, gpus int) {
	skipShort(b)
	e2e.RequireRoot(b)
	runc := e2e.RequireTool(b, "runc")
	host := newHost(b, fixture.Spec{Layout: "multiarch", GPUs: gpus})
	image := e2e.BuildRootfs(b, e2e.RootfsOptions{NoCudaprobe: true})
	bundle := e2e.MakeBundle(b, image, "/bin/true")
	e2e.EditSpec(b, bundle, func(s *specs.Spec) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations["cdi.k8s.io/nctk-bench"] = "nvidia.com/gpu=all"
	})
	specPath := filepath.Join(bundle, "config.json")
	orig := readFile(b, specPath)
	state := filepath.Join(e2e.TempDir(b, "state"), "runc")
	b.Cleanup(func() {
		out, _ := exec.Command(runc, "--root", state, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
		}
	})
	run := fileRunner(b)
	del := func(id string) {
		if out, err := exec.Command(runc, "--root", state, "delete", "--force", id).CombinedOutput(); err != nil {
			b.Fatalf("delete %s: %v\n%s", id, err, out)
		}
	}

	// One spec directory and config.toml per path.
	type cdiPath struct {
		bin     string // directory of the nctk build
		genArgs []string
		env     []string
	}
	paths := map[string]*cdiPath{
		"own": {bin: filepath.Dir(tool(b, "nctk"))},
		"sep": {bin: filepath.Dir(tool(b, "nctk")), genArgs: []string{"--separate-hooks"}},
	}
	if base := os.Getenv("NCTK_BENCH_BASELINE_BIN"); base != "" {
		paths["base"] = &cdiPath{bin: base}
	}
	for name, p := range paths {
		dir := e2e.TempDir(b, "cdi-"+name)
		cfgPath := filepath.Join(dir, "config.toml")
		cfg := fmt.Sprintf("[nvidia-container-cli]\nroot = %q\nldconfig = \"@/sbin/ldconfig\"\nload-kmods = false\n\n"+
			"[nvidia-container-runtime]\nruntimes = [%q]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [%q]\n",
			host.Root.Path, runc, dir)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			b.Fatal(err)
		}
		p.env = append(os.Environ(), "NVIDIA_CTK_CONFIG_FILE_PATH="+cfgPath)
		gen := exec.Command(filepath.Join(p.bin, "nvidia-ctk"), append([]string{"cdi", "generate", "--driver-root", host.Root.Path,
			"--nvidia-cdi-hook-path", filepath.Join(p.bin, "nvidia-cdi-hook"), "--output", filepath.Join(dir, "nvidia.yaml")}, p.genArgs...)...)
		gen.Env = p.env
		if out, err := gen.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", gen.Args, err, out)
		}
	}

	create := func(bin string, spec []byte, id string, env []string, prefix ...string) time.Duration {
		if err := os.WriteFile(specPath, spec, 0o644); err != nil {
			b.Fatal(err)
		}
		args := append(slices.Clone(prefix), bin, "--root", state, "create", "--bundle", bundle, id)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		start := time.Now()
		err := run(cmd)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		del(id)
		return d
	}
	wrapper := func(name string) string { return filepath.Join(paths[name].bin, "nvidia-container-runtime") }

	// The config.json each path writes (logged: the hooks it leaves); the
	// own path's without hooks is the floor.
	var floor []byte
	for n, p := range paths {
		create(wrapper(n), orig, "nctk-cdi-probe-"+n, p.env)
		written := readFile(b, specPath)
		b.Logf("%s: %d createContainer hooks in config.json, running %q", n, cdiHookCount(b, written), hookSubcommands(b, written))
		if n == "own" {
			floor = withoutHooks(b, written, nil)
		}
	}

	names := []string{"runc", "floor"}
	for n := range paths {
		names = append(names, n)
	}
	slices.Sort(names)
	times := map[string][]time.Duration{}
	extra, share := map[string][]time.Duration{}, map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		order := slices.Clone(names)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]time.Duration{}
		for _, n := range order {
			id := fmt.Sprintf("nctk-cdi-%d-%s", i, n)
			switch n {
			case "runc":
				got[n] = create(runc, orig, id, os.Environ())
			case "floor":
				got[n] = create(runc, floor, id, os.Environ())
			default:
				got[n] = create(wrapper(n), orig, id, paths[n].env)
			}
			times[n] = append(times[n], got[n])
		}
		for n := range paths {
			extra[n] = append(extra[n], got[n]-got["runc"])
			share[n] = append(share[n], got[n]-got["floor"])
		}
	}
	b.StopTimer()
	for _, n := range names {
		b.ReportMetric(ms(percentile(times[n], 50)), n+"-ms")
	}
	for n := range paths {
		b.ReportMetric(ms(percentile(extra[n], 50)), n+"-extra-ms")
		b.ReportMetric(ms(percentile(share[n], 50)), n+"-share-ms")
	}

	// The own path's wrapper in this process, up to the exec of runc
	// (config.toml, spec cache, plan, rootfs work, spec write): what of
	// own-share-ms is not process start-up.
	var inproc []time.Duration
	scratch := e2e.TempDir(b, "scratch")
	for range 50 {
		if err := os.WriteFile(filepath.Join(scratch, "config.json"), orig, 0o644); err != nil {
			b.Fatal(err)
		}
		rt := runtime.New()
		rt.Exec = func(string, []string, []string) error { return nil }
		rt.Self = tool(b, "nctk") // the hooks' nvidia-cdi-hook is its link
		var stderr strings.Builder
		e := &app.Env{Args: []string{wrapper("own"), "create", "--bundle", scratch, "x"},
			Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Environ: paths["own"].env}
		start := time.Now()
		code := rt.Run(e)
		inproc = append(inproc, time.Since(start))
		if code != 0 {
			b.Fatalf("runtime: exit %d: %s", code, stderr.String())
		}
		if n := cdiHookCount(b, readFile(b, filepath.Join(scratch, "config.json"))); n != 0 {
			b.Fatalf("in process: %d hooks left", n)
		}
	}
	b.ReportMetric(ms(percentile(inproc, 50)), "own-inproc-ms")

	strace, err := exec.LookPath("strace")
	if err != nil {
		return
	}
	// The created container keeps its stdio: a file, not a pipe.
	stdio, err := os.Create(filepath.Join(e2e.TempDir(b, "strace"), "stdio.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer stdio.Close()
	// strace -f follows the container's init, which waits for `start`
	// until the container is deleted: the summary is written once the
	// create has returned and the container is deleted.
	counts := func(n string) (calls, execs int) {
		out := filepath.Join(e2e.TempDir(b, "strace"), n)
		id := "nctk-cdi-strace-" + n
		bin, env := runc, os.Environ()
		spec := orig
		switch n {
		case "runc":
		case "floor":
			spec = floor
		default:
			bin, env = wrapper(n), paths[n].env
		}
		if err := os.WriteFile(specPath, spec, 0o644); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(strace, "-f", "-c", "-o", out, bin, "--root", state, "create", "--bundle", bundle, id)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = stdio, stdio
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, _ := exec.Command(runc, "--root", state, "state", id).Output()
			if strings.Contains(string(st), `"created"`) {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				b.Fatalf("%s: container %s not created under strace", n, id)
			}
		}
		del(id)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("strace %s: %v", n, err)
		}
		return straceCounts(b, out)
	}
	for _, n := range names {
		calls, execs := counts(n)
		b.ReportMetric(float64(calls), n+"-syscalls")
		b.ReportMetric(float64(execs), n+"-execs")
	}
	if err := os.WriteFile(specPath, orig, 0o644); err != nil {
		b.Fatal(err)
	}
}

// straceCounts reads the summary `strace -c` wrote to path: the total
// number of system calls and of execve calls.
func straceCounts(b *testing.B, path string) (calls, execs int) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		n, err := strconv.Atoi(f[3])
		if err != nil {
			continue
		}
		switch f[len(f)-1] {
		case "total":
			calls = n
		case "execve":
			execs = n
		}
	}
	if calls == 0 {
		b.Fatalf("no strace summary in %s:\n%s", path, data)
	}
	return calls, execs
}

// cdiHookCount is the number of createContainer hooks of a config.json.
func cdiHookCount(b *testing.B, spec []byte) int {
	var s specs.Spec
	if err := json.Unmarshal(spec, &s); err != nil {
		b.Fatal(err)
	}
	if s.Hooks == nil {
		return 0
	}
	return len(s.Hooks.CreateContainer)
}
