package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/buildid"
	"github.com/nctk/nctk/internal/cli/runtime"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/hostfacts"
)

// BenchmarkCreateCDI measures issue 12's create paths side by side: for a
// fixture driver with 1 and with 8 GPUs, in each iteration, in an order that
// alternates, the same bundle is created (and deleted) by every variant
// below. The bundle lives on tmpfs (as containerd's and CRI-O's do, under
// /run) and every create gets a fresh overlay of the image as its rootfs
// (a new upper directory, as an engine's container layer), so each create
// is a container's first: links, ld.so.cache and the drop-in are written
// into a layer that does not have them yet.
//
//	runc        plain `runc create` of the original config.json;
//	own         `nvidia-container-runtime create` in CDI mode
//	            (annotation cdi.k8s.io/nctk-bench=nvidia.com/gpu=all) with
//	            nctk's default spec: one chained hook, which the runtime
//	            recognises as its own and does in the rootfs itself;
//	sep         the same with a spec written with --separate-hooks
//	            (NVIDIA's layout: create-symlinks, update-ldcache running
//	            the host's ldconfig, disable-device-node-modification);
//	sep-native  `runc create` of the config.json the CDI library makes from
//	            that spec: NVIDIA's layout applied by an engine, calling
//	            nctk's hook (what the device plugin's and GPU Operator's
//	            specs do on a host with nctk; its first entry does the
//	            others' work, internal/hookbatch);
//	sep-native-gmp  the same with GOMAXPROCS=1 left out of the hooks'
//	            environment, as NVIDIA's nvidia-ctk writes that layout
//	            (and sep-native-gmp-rt: then nctk's runtime, below);
//	native      `runc create` of the config.json the CDI library makes from
//	            nctk's spec (InjectDevices, what podman, containerd's CRI
//	            and Docker 25+ do natively): its one chained hook process;
//	native-rt,  nctk's runtime (CDI mode) on the config.json of native and of
//	sep-native-rt  sep-native: an engine applies the spec, then runs the
//	            runtime (a Kubernetes runtime class naming it), which does
//	            the spec's own hooks itself;
//	legacy      `nvidia-container-runtime create` in legacy mode
//	            (NVIDIA_VISIBLE_DEVICES=all);
//	hook        `runc create` with the prestart hook `docker run --gpus`
//	            adds (nvidia-container-runtime-hook → configure, in process);
//	base        only when $NCTK_BENCH_BASELINE_BIN names a directory with
//	            another nctk build: that build's spec and runtime (CDI mode),
//	            and base-native, base-sep, base-sep-native, base-native-rt,
//	            base-sep-native-rt, base-legacy, base-hook as above;
//	nv-cdi      only when $NCTK_BENCH_NVIDIA_BIN names a directory with
//	            NVIDIA's nvidia-container-runtime and nvidia-cdi-hook
//	            (1.20, built locally): NVIDIA's runtime in CDI mode with the
//	            --separate-hooks spec naming NVIDIA's hook;
//	nv-native   the same spec applied by the CDI library, NVIDIA's hook
//	            processes run by runc, one per entry;
//	floor-*     `runc create` of the config.json a path produced, without
//	            its hooks: what the devices and mounts cost runc itself
//	            (paths whose hook-less config.json is the same share one);
//	floor-m-*   a runtime path's config.json as the runtime writes it
//	            without a pid file: the driver's mounts, which it makes
//	            itself after a create with one, left to runc (below);
//	floor-mounts  the hook path's plan as config.json mounts and devices
//	            (below).
//
// Metrics (ms, medians): <v>-ms; <v>-extra-ms, the median of the
// per-iteration differences v − runc; <v>-share-ms, v − its floor (nctk's
// or NVIDIA's own share: the wrapper and its hooks); <v>-share-lo-ms and
// <v>-share-hi-ms, the 95% interval of that median (medianCI), and a log
// line saying whether it is under 5 ms, over it or across it. A path whose
// floor lacks mounts the container gets also has <v>-mshare-ms (and its
// interval, <v>-mshare-lo-ms and <v>-mshare-hi-ms), its share over a
// second floor that holds them (the same container made by runc
// alone, what issue 12 calls the floor the spec's mounts and devices set):
// a runtime path (the runtime makes the driver's mounts itself after a
// create with a pid file, and the config.json it gives runc lacks them) over
// floor-m-*, and the hook path (its floor is plain runc: the hook makes the
// mounts) over floor-mounts, runc on the config.json the runtime's legacy
// mode writes for the same plan without a pid file (hooks dropped).
// <v>-cpu-ms and
// <v>-cpu-share-ms are the same for the CPU time of the create's processes
// (the container's init left out), which the load changes much less; they
// are not reported for variants whose config.json keeps createContainer
// hooks (runc runs those from the container's init). With strace installed,
// each variant is also run once under `strace -f -c`: <v>-syscalls and
// <v>-execs (the whole process tree of one create).
//
// Run: go test ./test/e2e -run '^$' -bench BenchmarkCreateCDI -benchtime 40x
// (-v for the log lines). On the 2-vCPU development VM 100 iterations give
// intervals 3-4 ms wide; for a verdict on 5 ms, 300 iterations of the paths
// in question ($NCTK_BENCH_ONLY) give 1.5-2 ms.
func BenchmarkCreateCDI(b *testing.B) {
	for _, gpus := range []int{1, 8} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) { benchCreateCDI(b, gpus) })
	}
}

// benchVariant is one way of creating the bundle's container.
type benchVariant struct {
	bin   string   // the program run with create's arguments
	env   []string // its environment
	spec  []byte   // the config.json it is given
	floor string   // the variant its share is taken against
	// mountFloor: a second floor, for the paths that make the plan's
	// mounts themselves (the runtime's after the create, the --gpus
	// hook's): the same container made by runc alone.
	mountFloor string
	// inInit: its config.json has createContainer hooks, which runc runs
	// from the container's init: their CPU time is not the create's.
	inInit bool
}

func benchCreateCDI(b *testing.B, gpus int) {
	skipShort(b)
	e2e.RequireRoot(b)
	runc := e2e.RequireTool(b, "runc")
	host := newHost(b, fixture.Spec{Layout: "multiarch", GPUs: gpus})
	image := e2e.BuildRootfs(b, e2e.RootfsOptions{NoCudaprobe: true})
	// The library facts table (hostfacts.LibFacts) is what a host learnt
	// about its driver's files. Every test before this one made a fixture
	// driver of new files, so here it holds what thousands of them said
	// (1,241 entries once, 65 KB, read and indexed by every hook: ~0.7 ms
	// of the --gpus and native paths' share); a real host's holds its one
	// driver. Start from none, as a host after boot (it is a cache: the
	// first create relearns this driver).
	facts := filepath.Join(hostfacts.DefaultDir(os.Getenv), "lib-facts.bin")
	if err := os.Remove(facts); err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	// The bundle and runc's state on tmpfs, as an engine's under /run.
	shm, err := os.MkdirTemp("/dev/shm", "nctk-bench-")
	if err != nil {
		b.Skipf("no tmpfs for the bundle: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(shm) })
	bundle := filepath.Join(shm, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		b.Fatal(err)
	}
	src := e2e.MakeBundle(b, image, "/bin/true")
	rootfsDir := filepath.Join(bundle, "rootfs")
	e2e.EditSpec(b, src, func(s *specs.Spec) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations["cdi.k8s.io/nctk-bench"] = "nvidia.com/gpu=all"
		s.Root.Path = rootfsDir
	})
	orig := readFile(b, filepath.Join(src, "config.json"))
	specPath := filepath.Join(bundle, "config.json")
	state := filepath.Join(shm, "state")
	// The overlay's upper and work directories: on tmpfs too, unless
	// $NCTK_BENCH_LAYER_DIR names a directory (on disk, as an engine's
	// container layers). On the development VM's root file system (ext4
	// without a journal) every new inode costs ~0.5 ms once many were
	// deleted recently (ext4 skips recently deleted inodes when it has no
	// journal), and runc's mount targets, the image's links and ld.so.cache
	// are new inodes in a fresh layer: that, not the runtimes, would be
	// measured.
	layers := filepath.Join(shm, "layers")
	if dir := os.Getenv("NCTK_BENCH_LAYER_DIR"); dir != "" {
		if layers, err = os.MkdirTemp(dir, "nctk-bench-layers-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(layers) })
	}
	b.Cleanup(func() {
		out, _ := exec.Command(runc, "--root", state, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
		}
		_ = unix.Unmount(rootfsDir, unix.MNT_DETACH)
	})
	run := fileRunner(b)
	// freshRootfs mounts a new overlay of the image at the bundle's rootfs.
	layer := 0
	freshRootfs := func() {
		layer++
		upper, work := filepath.Join(layers, fmt.Sprintf("u%d", layer)), filepath.Join(layers, fmt.Sprintf("w%d", layer))
		for _, d := range []string{upper, work, rootfsDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := unix.Mount("overlay", rootfsDir, "overlay", 0, "lowerdir="+image+",upperdir="+upper+",workdir="+work); err != nil {
			b.Fatalf("overlay rootfs: %v", err)
		}
	}
	dropRootfs := func() {
		if err := unix.Unmount(rootfsDir, 0); err != nil {
			b.Fatalf("unmount rootfs: %v", err)
		}
		upper, work := filepath.Join(layers, fmt.Sprintf("u%d", layer)), filepath.Join(layers, fmt.Sprintf("w%d", layer))
		_ = os.RemoveAll(upper)
		_ = os.RemoveAll(work)
	}
	del := func(id string) {
		if out, err := exec.Command(runc, "--root", state, "delete", "--force", id).CombinedOutput(); err != nil {
			b.Fatalf("delete %s: %v\n%s", id, err, out)
		}
	}

	// One spec directory and config.toml per spec.
	nctkBin := filepath.Dir(tool(b, "nctk"))
	specDir := func(name, bin string, mode string, genArgs ...string) []string {
		dir := e2e.TempDir(b, "cdi-"+name)
		cfgPath := filepath.Join(dir, "config.toml")
		cfg := fmt.Sprintf("[nvidia-container-cli]\nroot = %q\npath = %q\nldconfig = \"@/sbin/ldconfig\"\nload-kmods = false\n\n"+
			"[nvidia-container-runtime]\nmode = %q\nruntimes = [%q]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [%q]\n",
			host.Root.Path, filepath.Join(bin, "nvidia-container-cli"), mode, runc, dir)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			b.Fatal(err)
		}
		env := append(os.Environ(), "NVIDIA_CTK_CONFIG_FILE_PATH="+cfgPath)
		if mode == "cdi" {
			gen := exec.Command(filepath.Join(nctkBin, "nvidia-ctk"), append([]string{"cdi", "generate", "--driver-root", host.Root.Path,
				"--nvidia-cdi-hook-path", filepath.Join(bin, "nvidia-cdi-hook"), "--output", filepath.Join(dir, "nvidia.yaml")}, genArgs...)...)
			if bin != nctkBin {
				gen = exec.Command(filepath.Join(bin, "nvidia-ctk"), gen.Args[1:]...)
			}
			gen.Env = env
			if out, err := gen.CombinedOutput(); err != nil {
				b.Fatalf("%s: %v\n%s", gen.Args, err, out)
			}
		}
		return append(env, "NCTK_BENCH_SPEC_DIR="+dir)
	}
	specDirOf := func(env []string) string {
		return strings.TrimPrefix(env[len(env)-1], "NCTK_BENCH_SPEC_DIR=")
	}
	withEnv := func(spec []byte, kv string) []byte {
		var s specs.Spec
		if err := json.Unmarshal(spec, &s); err != nil {
			b.Fatal(err)
		}
		s.Process.Env = append(s.Process.Env, kv)
		delete(s.Annotations, "cdi.k8s.io/nctk-bench")
		out, err := json.Marshal(&s)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	legacySpec := withEnv(orig, "NVIDIA_VISIBLE_DEVICES=all")

	vs := map[string]*benchVariant{"runc": {bin: runc, env: os.Environ(), spec: orig}}
	wrapper := func(bin string, env []string, spec []byte) *benchVariant {
		return &benchVariant{bin: filepath.Join(bin, "nvidia-container-runtime"), env: env, spec: spec}
	}
	ownEnv := specDir("own", nctkBin, "cdi")
	vs["own"] = wrapper(nctkBin, ownEnv, orig)
	own := vs["own"] // the in-process runs below use it whatever $NCTK_BENCH_ONLY keeps
	sepEnv := specDir("sep", nctkBin, "cdi", "--separate-hooks")
	vs["sep"] = wrapper(nctkBin, sepEnv, orig)
	sep := vs["sep"]
	vs["sep-native"] = &benchVariant{bin: runc, env: os.Environ(), spec: cdiInjected(b, orig, specDirOf(sepEnv))}
	// NVIDIA's layout as NVIDIA's nvidia-ctk writes it, naming nctk's
	// hook: its hooks' environment has no GOMAXPROCS=1.
	nvLayout := e2e.TempDir(b, "cdi-sep-gmp")
	sepYAML := readFile(b, filepath.Join(specDirOf(sepEnv), "nvidia.yaml"))
	noGMP := regexp.MustCompile(`(?m)^ *- GOMAXPROCS=1\n`).ReplaceAll(sepYAML, nil)
	if bytes.Equal(noGMP, sepYAML) {
		b.Fatal("sep-native-gmp: the --separate-hooks spec names no GOMAXPROCS=1 to leave out")
	}
	if err := os.WriteFile(filepath.Join(nvLayout, "nvidia.yaml"), noGMP, 0o644); err != nil {
		b.Fatal(err)
	}
	vs["sep-native-gmp"] = &benchVariant{bin: runc, env: os.Environ(), spec: cdiInjected(b, orig, nvLayout)}
	vs["native"] = &benchVariant{bin: runc, env: os.Environ(), spec: cdiInjected(b, orig, specDirOf(ownEnv))}
	vs["native-rt"] = wrapper(nctkBin, ownEnv, vs["native"].spec)
	vs["sep-native-rt"] = wrapper(nctkBin, sepEnv, vs["sep-native"].spec)
	vs["sep-native-gmp-rt"] = wrapper(nctkBin, sepEnv, vs["sep-native-gmp"].spec)
	vs["legacy"] = wrapper(nctkBin, specDir("legacy", nctkBin, "legacy"), legacySpec)
	lv := vs["legacy"] // the hook's plan (floor-mounts below), whatever $NCTK_BENCH_ONLY keeps
	vs["hook"] = &benchVariant{bin: runc, env: os.Environ(), floor: "runc",
		spec: withPrestartHook(b, legacySpec, tool(b, "nvidia-container-runtime-hook"), specDirOf(lv.env)+"/config.toml")}
	if base := os.Getenv("NCTK_BENCH_BASELINE_BIN"); base != "" {
		// The baseline build on the CDI (its runtime, and its spec applied
		// natively), legacy and --gpus hook paths.
		baseEnv := specDir("base", base, "cdi")
		vs["base"] = wrapper(base, baseEnv, orig)
		vs["base-native"] = &benchVariant{bin: runc, env: os.Environ(), spec: cdiInjected(b, orig, specDirOf(baseEnv))}
		baseSep := specDir("base-sep", base, "cdi", "--separate-hooks")
		vs["base-sep"] = wrapper(base, baseSep, orig)
		vs["base-sep-native"] = &benchVariant{bin: runc, env: os.Environ(), spec: cdiInjected(b, orig, specDirOf(baseSep))}
		vs["base-native-rt"] = wrapper(base, baseEnv, vs["base-native"].spec)
		vs["base-sep-native-rt"] = wrapper(base, baseSep, vs["base-sep-native"].spec)
		baseLegacy := specDir("base-legacy", base, "legacy")
		vs["base-legacy"] = wrapper(base, baseLegacy, legacySpec)
		vs["base-hook"] = &benchVariant{bin: runc, env: os.Environ(), floor: "runc",
			spec: withPrestartHook(b, legacySpec, filepath.Join(base, "nvidia-container-runtime-hook"), specDirOf(baseLegacy)+"/config.toml")}
	} else {
		b.Log("base: skipped ($NCTK_BENCH_BASELINE_BIN does not name another nctk build)")
	}
	if nv := os.Getenv("NCTK_BENCH_NVIDIA_BIN"); nv != "" {
		// The spec is nctk's, in NVIDIA's layout, naming NVIDIA's hook:
		// NVIDIA's nvidia-ctk needs NVML to generate one.
		dir := specDir("nv", nv, "legacy")
		gen := exec.Command(filepath.Join(nctkBin, "nvidia-ctk"), "cdi", "generate", "--driver-root", host.Root.Path, "--separate-hooks",
			"--nvidia-cdi-hook-path", filepath.Join(nv, "nvidia-cdi-hook"), "--output", filepath.Join(specDirOf(dir), "nvidia.yaml"))
		if out, err := gen.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", gen.Args, err, out)
		}
		cfgPath := filepath.Join(specDirOf(dir), "config.toml")
		cfg := fmt.Sprintf("[nvidia-container-runtime]\nmode = \"cdi\"\nruntimes = [%q]\n\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [%q]\n"+
			"\n[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"disabled\"\n", runc, specDirOf(dir))
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			b.Fatal(err)
		}
		vs["nv-cdi"] = wrapper(nv, dir, orig)
		vs["nv-native"] = &benchVariant{bin: runc, env: os.Environ(), spec: cdiInjected(b, orig, specDirOf(dir))}
	} else {
		b.Log("nv-cdi, nv-native: skipped ($NCTK_BENCH_NVIDIA_BIN does not name a directory with NVIDIA's 1.20 nvidia-container-runtime and nvidia-cdi-hook)")
	}

	// cpu is the CPU time of each variant's last create: the create's
	// process and the children it waited for (runc, hooks, ldconfig), not
	// the container's init. Unlike the wall time it hardly depends on the
	// machine's load.
	cpu := map[*benchVariant]time.Duration{}
	// createWith creates (and deletes) the container with v and the create
	// flags given; the runtime leaves its config.json at specPath.
	createWith := func(v *benchVariant, id string, flags ...string) time.Duration {
		if err := os.WriteFile(specPath, v.spec, 0o644); err != nil {
			b.Fatal(err)
		}
		freshRootfs()
		cmd := exec.Command(v.bin, append(append([]string{"--root", state, "create", "--bundle", bundle}, flags...), id)...)
		cmd.Env = v.env
		start := time.Now()
		err := run(cmd)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		cpu[v] = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		del(id)
		dropRootfs()
		return d
	}
	// create is createWith a pid file, as every engine's create: the
	// runtime then does a created container's work itself (none on a host
	// without the driver in procfs, as here).
	create := func(v *benchVariant, id string) time.Duration {
		return createWith(v, id, "--pid-file", filepath.Join(shm, "pid"))
	}

	// $NCTK_BENCH_ONLY (comma-separated variant names) keeps only those
	// paths (with plain runc and their floors): for quicker rounds and
	// profiles of one path.
	if only := os.Getenv("NCTK_BENCH_ONLY"); only != "" {
		keep := strings.Split(only, ",")
		for n := range vs {
			if n != "runc" && !slices.Contains(keep, n) {
				delete(vs, n)
			}
		}
		b.Logf("only %q (and runc, floors): $NCTK_BENCH_ONLY", keep)
	}

	// The config.json each path produces, without its hooks, is its
	// floor; equal floors are one variant.
	paths := slices.Sorted(maps.Keys(vs))
	floors := map[string]string{} // canonical config.json -> floor variant
	// floorOf is the floor variant of a hook-less config.json: the one
	// already made for an equal document, else a new one named name.
	floorOf := func(name string, spec []byte) string {
		key := canonicalJSON(b, spec)
		if f, ok := floors[key]; ok {
			return f
		}
		floors[key] = name
		vs[name] = &benchVariant{bin: runc, env: os.Environ(), spec: spec}
		return name
	}
	for _, n := range paths {
		v := vs[n]
		if n == "runc" || v.floor != "" {
			continue
		}
		written := v.spec
		if v.bin != runc {
			create(v, "nctk-cdi-probe-"+n)
			written = readFile(b, specPath)
		}
		b.Logf("%s: %d mounts and %d createContainer hooks in config.json, running %q", n, countMounts(b, written), cdiHookCount(b, written), hookSubcommands(b, written))
		if strings.HasSuffix(n, "-rt") && !strings.HasPrefix(n, "base-") && cdiHookCount(b, written) > 0 {
			// nctk's runtime does the hooks of an engine-applied spec
			// (nctk's or NVIDIA's layout naming nctk's hook) itself; a
			// baseline build may predate that.
			b.Fatalf("%s: the runtime left hooks %q in config.json", n, hookSubcommands(b, written))
		}
		v.inInit = cdiHookCount(b, written) > 0
		v.floor = floorOf("floor-"+n, withoutHooks(b, written, nil))
		if v.bin == runc {
			continue
		}
		// A runtime makes the driver's mounts itself after a create with
		// a pid file: the config.json it gives runc then lacks them, and
		// so does that floor. Its second floor holds them: runc on the
		// config.json the runtime writes when it cannot work after the
		// create (no pid file), without its hooks — the same container
		// made by runc alone.
		createWith(v, "nctk-cdi-probe-m-"+n)
		mfloor := withoutHooks(b, readFile(b, specPath), nil)
		if countMounts(b, mfloor) > countMounts(b, written) {
			v.mountFloor = floorOf("floor-m-"+n, mfloor)
			b.Logf("%s: its second floor %s: %d mounts", n, v.mountFloor, countMounts(b, mfloor))
		}
	}

	// The --gpus hook makes its plan's mounts and device nodes itself; the
	// other paths' floors hold theirs. Its second floor: runc on the
	// config.json the runtime's legacy mode writes for the same plan (the
	// hook reads legacy's config.toml) when it cannot do that work after
	// the create (no pid file), without its hooks.
	if hv := vs["hook"]; hv != nil {
		createWith(lv, "nctk-cdi-probe-mounts")
		floor := withoutHooks(b, readFile(b, specPath), nil)
		if countMounts(b, floor) <= countMounts(b, vs["runc"].spec) {
			b.Fatal("floor-mounts: the legacy runtime without a pid file wrote no driver mounts into config.json")
		}
		hv.mountFloor = floorOf("floor-mounts", floor)
		b.Logf("hook: its second floor %s: %d mounts (plain runc's %d)", hv.mountFloor, countMounts(b, floor), countMounts(b, vs["runc"].spec))
	}

	names := slices.Sorted(maps.Keys(vs))
	times, cpus := map[string][]time.Duration{}, map[string][]time.Duration{}
	extra, share, cpuShare := map[string][]time.Duration{}, map[string][]time.Duration{}, map[string][]time.Duration{}
	mshare := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		order := slices.Clone(names)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]time.Duration{}
		for _, n := range order {
			got[n] = create(vs[n], fmt.Sprintf("nctk-cdi-%d-%s", i, n))
			times[n] = append(times[n], got[n])
			cpus[n] = append(cpus[n], cpu[vs[n]])
		}
		for _, n := range names {
			if f := vs[n].floor; f != "" {
				extra[n] = append(extra[n], got[n]-got["runc"])
				share[n] = append(share[n], got[n]-got[f])
				cpuShare[n] = append(cpuShare[n], cpu[vs[n]]-cpu[vs[f]])
			}
			if f := vs[n].mountFloor; f != "" {
				mshare[n] = append(mshare[n], got[n]-got[f])
			}
		}
	}
	b.StopTimer()
	for _, n := range names {
		b.ReportMetric(ms(percentile(times[n], 50)), n+"-ms")
		if !vs[n].inInit {
			b.ReportMetric(ms(percentile(cpus[n], 50)), n+"-cpu-ms")
		}
		if vs[n].floor != "" {
			b.ReportMetric(ms(percentile(extra[n], 50)), n+"-extra-ms")
			reportMedian(b, n+"-share", n+": share", share[n])
			if n == "legacy" { // issue 12: at most 5 ms over plain runc too
				reportMedian(b, "", n+": over plain runc", extra[n])
			}
			if !vs[n].inInit {
				b.ReportMetric(ms(percentile(cpuShare[n], 50)), n+"-cpu-share-ms")
			}
		}
		if vs[n].mountFloor != "" {
			reportMedian(b, n+"-mshare", n+": share over "+vs[n].mountFloor, mshare[n])
		}
	}

	// The own path's wrapper in this process, up to the exec of runc
	// (config.toml, spec cache, plan, rootfs work, spec write): what of
	// own-share-ms is not process start-up; with $NCTK_BENCH_INPROC=sep,
	// the sep path's (NVIDIA's layout, the ld.so.cache rebuilt).
	// With $NCTK_BENCH_CPUPROFILE set, 500 runs are profiled into that file.
	inprocName, inprocV := "own", own
	if os.Getenv("NCTK_BENCH_INPROC") == "sep" {
		inprocName, inprocV = "sep", sep
	}
	var inproc []time.Duration
	scratch := e2e.TempDir(b, "scratch")
	runs := 50
	if prof := os.Getenv("NCTK_BENCH_CPUPROFILE"); prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
		runs = 500
	}
	hookID, err := buildid.Read(tool(b, "nvidia-cdi-hook"))
	if err != nil {
		b.Fatal(err)
	}
	for range runs {
		if err := os.WriteFile(filepath.Join(scratch, "config.json"), orig, 0o644); err != nil {
			b.Fatal(err)
		}
		freshRootfs()
		rt := runtime.New()
		rt.Exec = func(string, []string, []string) error { return nil }
		rt.Self = tool(b, "nctk")
		rt.HookBuildID = hookID // the spec's hook binary is its own
		var stderr strings.Builder
		e := &app.Env{Args: []string{inprocV.bin, "create", "--bundle", scratch, "x"},
			Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr, Environ: inprocV.env}
		start := time.Now()
		code := rt.Run(e)
		inproc = append(inproc, time.Since(start))
		dropRootfs()
		if code != 0 {
			b.Fatalf("runtime: exit %d: %s", code, stderr.String())
		}
		// The hooks whose work the runtime does itself are gone; those that
		// need the container's own /dev (update-application-profile, the
		// GPUs' minors) stay.
		if left := hookSubcommands(b, readFile(b, filepath.Join(scratch, "config.json"))); slices.ContainsFunc(left, func(s string) bool {
			return s == hookargs.NameCreateSymlinks || s == hookargs.NameUpdateLdcache
		}) {
			b.Fatalf("in process: hooks %q left", left)
		}
	}
	b.ReportMetric(ms(percentile(inproc, 50)), inprocName+"-inproc-ms")

	strace, err := exec.LookPath("strace")
	if err != nil {
		b.Log("syscall counts: skipped (no strace)")
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
		v := vs[n]
		out := filepath.Join(e2e.TempDir(b, "strace"), n)
		id := "nctk-cdi-strace-" + n
		if err := os.WriteFile(specPath, v.spec, 0o644); err != nil {
			b.Fatal(err)
		}
		freshRootfs()
		defer dropRootfs()
		cmd := exec.Command(strace, "-f", "-c", "-o", out, v.bin, "--root", state, "create", "--bundle", bundle, "--pid-file", filepath.Join(shm, "pid"), id)
		cmd.Env = v.env
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
			// Under strace and load the create's own process may still be
			// finishing when the container is deleted; the counts of what
			// it did are in the file either way.
			b.Logf("strace %s: %v (counts kept)", n, err)
		}
		return straceCounts(b, out)
	}
	for _, n := range names {
		calls, execs := counts(n)
		b.ReportMetric(float64(calls), n+"-syscalls")
		b.ReportMetric(float64(execs), n+"-execs")
	}
}

// reportMedian reports the median of ds and its 95% interval (medianCI) as
// the metrics <metric>-ms, <metric>-lo-ms and <metric>-hi-ms (none for
// metric ""), and logs what, the median, the interval and its verdict on
// issue 12's 5 ms.
func reportMedian(b *testing.B, metric, what string, ds []time.Duration) {
	b.Helper()
	med := percentile(ds, 50)
	lo, hi := medianCI(ds)
	if metric != "" {
		b.ReportMetric(ms(med), metric+"-ms")
		b.ReportMetric(ms(lo), metric+"-lo-ms")
		b.ReportMetric(ms(hi), metric+"-hi-ms")
	}
	b.Logf("%s %.1f ms, 95%% interval of the median %.1f–%.1f: %s", what, ms(med), ms(lo), ms(hi), verdict(lo, hi, 5*time.Millisecond))
}

// verdict says where a median's 95% interval [lo, hi] lies against a goal
// of at most goal: under it, over it, or across it (this run cannot tell).
func verdict(lo, hi, goal time.Duration) string {
	switch {
	case hi <= goal:
		return "at most " + goal.String() + " (met)"
	case lo > goal:
		return "over " + goal.String() + " (not met)"
	default:
		return "across " + goal.String() + " (this run cannot tell)"
	}
}

// countMounts is the number of mounts in the config.json spec.
func countMounts(b *testing.B, spec []byte) int {
	var s specs.Spec
	if err := json.Unmarshal(spec, &s); err != nil {
		b.Fatal(err)
	}
	return len(s.Mounts)
}

// cdiInjected returns spec with the devices its cdi.k8s.io/nctk-bench
// annotation names injected from the specs in dir by the CDI library, as
// an engine with native CDI support does (the annotation removed).
func cdiInjected(b *testing.B, spec []byte, dir string) []byte {
	var s specs.Spec
	if err := json.Unmarshal(spec, &s); err != nil {
		b.Fatal(err)
	}
	devices := strings.Split(s.Annotations["cdi.k8s.io/nctk-bench"], ",")
	delete(s.Annotations, "cdi.k8s.io/nctk-bench")
	injectCDI(b, &s, dir, devices...)
	out, err := json.Marshal(&s)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// injectCDI applies the CDI devices of the specs in dir to s with the CDI
// library, as podman, containerd's CRI and Docker 25+ do.
func injectCDI(t testing.TB, s *specs.Spec, dir string, devices ...string) {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cache.InjectDevices(s, devices...); err != nil {
		t.Fatalf("inject %v from %s: %v", devices, dir, err)
	}
}

// canonicalJSON is data re-encoded with sorted keys: equal for equal
// documents whatever wrote them.
func canonicalJSON(b *testing.B, data []byte) string {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		b.Fatal(err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return string(out)
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
