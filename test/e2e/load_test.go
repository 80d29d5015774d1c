package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
)

// loadSize is how much load the load tests make. NCTK_LOAD=1 (make load)
// gives issue 13's operator load: 100 creates through the runtime, 15 at a
// time, and 50 concurrent docker runs per path; without it a small load
// runs with the normal suite.
type loadSize struct {
	creates, parallel, dockerRuns int
}

func loadSizeFromEnv() loadSize {
	if os.Getenv("NCTK_LOAD") == "1" {
		return loadSize{creates: 100, parallel: 15, dockerRuns: 50}
	}
	return loadSize{creates: 10, parallel: 5, dockerRuns: 3}
}

// createResult is what one create through the runtime gave: config.json
// (its per-container cgroupsPath blanked), the host view of the rootfs
// (links, ld.so.cache, drop-in, mount points), the container's mounts and
// the open descriptors of its init (as runc leaves it waiting to start).
type createResult struct {
	spec   []byte
	tree   map[string]string
	mounts []string
	fds    []string
	took   time.Duration
	err    error
}

// TestLoadCreates is issue 13's create load: size.creates containers
// created through nvidia-container-runtime (real runc, a 4-GPU fixture
// driver, NVIDIA_VISIBLE_DEVICES=all), size.parallel at a time, each on its
// own copy of one image. Every create must give the same config.json,
// rootfs and container mounts, its init must hold exactly the descriptors
// of a plain runc create's init (nothing nctk opened leaks into the
// container), and when every container is deleted no mount, runc or nctk
// process or cgroup may be left.
func TestLoadCreates(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	size := loadSizeFromEnv()
	runc := e2e.RequireTool(t, "runc")
	host := newHost(t, fixture.Spec{Layout: "multiarch", GPUs: 4})
	image := e2e.BuildRootfs(t, e2e.RootfsOptions{NoCudaprobe: true})
	work := e2e.TempDir(t, "load")
	state := filepath.Join(work, "runc-state")
	// config.toml as installed (info level, no debug log).
	cfgPath := filepath.Join(host.Dir, "load.toml")
	cfg := fmt.Sprintf("[nvidia-container-cli]\nroot = %q\nldconfig = \"@/sbin/ldconfig\"\nload-kmods = false\n\n"+
		"[nvidia-container-runtime]\nruntimes = [%q]\n", host.Root.Path, runc)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "NVIDIA_CTK_CONFIG_FILE_PATH="+cfgPath)
	tmpl := e2e.MakeBundle(t, image, "/bin/true")
	var spec specs.Spec
	if err := json.Unmarshal(readFile(t, filepath.Join(tmpl, "config.json")), &spec); err != nil {
		t.Fatal(err)
	}
	spec.Root.Path = "rootfs"
	prefix := fmt.Sprintf("nctk-load-%d-", os.Getpid())
	t.Cleanup(func() {
		out, _ := exec.Command(runc, "--root", state, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			_ = exec.Command(runc, "--root", state, "delete", "--force", id).Run()
		}
	})

	// create makes container i through bin with the GPU request or none,
	// records what it gave and deletes it.
	create := func(i int, bin string, gpu bool) createResult {
		id := fmt.Sprintf("%s%03d", prefix, i)
		bundle := filepath.Join(work, id)
		if err := os.MkdirAll(bundle, 0o755); err != nil {
			return createResult{err: err}
		}
		defer os.RemoveAll(bundle)
		if out, err := exec.Command("cp", "-a", image, filepath.Join(bundle, "rootfs")).CombinedOutput(); err != nil {
			return createResult{err: fmt.Errorf("copy the image: %v: %s", err, out)}
		}
		s := spec
		s.Process = &specs.Process{}
		*s.Process = *spec.Process
		s.Process.Env = slices.Clone(spec.Process.Env)
		if gpu {
			s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all")
		}
		s.Linux = &specs.Linux{}
		*s.Linux = *spec.Linux
		s.Linux.CgroupsPath = "/" + id
		data, err := json.MarshalIndent(&s, "", "\t")
		if err != nil {
			return createResult{err: err}
		}
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
			return createResult{err: err}
		}
		logf, err := os.Create(filepath.Join(bundle, "create.log"))
		if err != nil {
			return createResult{err: err}
		}
		defer logf.Close()
		cmd := exec.Command(bin, "--root", state, "create", "--bundle", bundle, id)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
		start := time.Now()
		err = cmd.Run()
		r := createResult{took: time.Since(start)}
		defer func() {
			if out, err := exec.Command(runc, "--root", state, "delete", "--force", id).CombinedOutput(); err != nil && r.err == nil {
				r.err = fmt.Errorf("delete %s: %v: %s", id, err, out)
			}
		}()
		if err != nil {
			out, _ := os.ReadFile(logf.Name())
			r.err = fmt.Errorf("create %s: %v: %s", id, err, clip(string(out)))
			return r
		}
		r.spec = bytes.ReplaceAll(readFile(t, filepath.Join(bundle, "config.json")), []byte(id), []byte("ID"))
		r.tree = e2e.TreeState(t, filepath.Join(bundle, "rootfs"))
		pid, err := initPid(runc, state, id)
		if err != nil {
			r.err = err
			return r
		}
		r.mounts, r.err = containerMounts(pid)
		if r.err == nil {
			r.fds, r.err = openFDs(pid)
		}
		return r
	}

	base := create(-1, runc, false)
	if base.err != nil {
		t.Fatalf("plain runc create: %v", base.err)
	}
	procsBefore := runtimeProcesses(state, prefix)
	// load makes size.creates containers, size.parallel at a time.
	load := func(first int, bin string, gpu bool) ([]createResult, time.Duration) {
		results := make([]createResult, size.creates)
		sem := make(chan struct{}, size.parallel)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range results {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				results[i] = create(first+i, bin, gpu)
			}()
		}
		wg.Wait()
		return results, time.Since(start)
	}
	results, wall := load(0, tool(t, "nvidia-container-runtime"), true)
	// The same load through plain runc, without a GPU, for comparison.
	plain, plainWall := load(size.creates, runc, false)
	var plainTook []time.Duration
	for i, r := range plain {
		if r.err != nil {
			t.Errorf("plain runc create %d: %v", i, r.err)
		}
		plainTook = append(plainTook, r.took)
	}

	var took []time.Duration
	for i, r := range results {
		if r.err != nil {
			t.Errorf("create %d: %v", i, r.err)
			continue
		}
		took = append(took, r.took)
		ref := results[0]
		switch {
		case ref.err != nil:
		case !bytes.Equal(r.spec, ref.spec):
			t.Errorf("create %d wrote another config.json than create 0:\n%s\nwant\n%s", i, r.spec, ref.spec)
		case !maps.Equal(r.tree, ref.tree):
			t.Errorf("create %d left another rootfs than create 0: %v", i, e2e.TreeDiff(r.tree, ref.tree))
		case !slices.Equal(r.mounts, ref.mounts):
			t.Errorf("create %d mounted\n%v\nwant (create 0)\n%v", i, r.mounts, ref.mounts)
		}
		if !slices.Equal(r.fds, base.fds) {
			t.Errorf("create %d: the container's init holds %v, a plain runc create's %v", i, r.fds, base.fds)
		}
	}
	if len(results) > 0 && results[0].err == nil {
		if _, ok := results[0].tree["/etc/ld.so.cache"]; !ok || len(results[0].mounts) <= len(base.mounts) {
			t.Errorf("the creates injected nothing: %d mounts (plain runc: %d)", len(results[0].mounts), len(base.mounts))
		}
	}
	// Nothing left: containers, mounts, processes, cgroups.
	if out, _ := exec.Command(runc, "--root", state, "list", "-q").Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("containers left: %s", out)
	}
	if n := mountsBelow(t, work); n != 0 {
		t.Errorf("%d mounts left below %s", n, work)
	}
	// A killed init is reaped by its new parent a moment later.
	after := runtimeProcesses(state, prefix)
	for deadline := time.Now().Add(5 * time.Second); !slices.Equal(after, procsBefore) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		after = runtimeProcesses(state, prefix)
	}
	if !slices.Equal(after, procsBefore) {
		t.Errorf("runc/nctk processes: %v, before the load %v", after, procsBefore)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/" + prefix + "*"); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/" + prefix + "*"); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	report := func(what string, took []time.Duration, wall time.Duration) {
		t.Logf("load: %d creates through %s, %d at a time, in %v (%.1f/s); per create: median %v, p90 %v, max %v",
			len(took), what, size.parallel, wall.Round(time.Millisecond), float64(len(took))/wall.Seconds(),
			percentile(took, 50).Round(time.Millisecond), percentile(took, 90).Round(time.Millisecond), percentile(took, 100).Round(time.Millisecond))
	}
	report("nvidia-container-runtime (NVIDIA_VISIBLE_DEVICES=all, 4 GPUs)", took, wall)
	report("plain runc (no GPU)", plainTook, plainWall)
}

// initPid is the pid of container id's init (runc state).
func initPid(runc, state, id string) (int, error) {
	out, err := exec.Command(runc, "--root", state, "state", id).Output()
	if err != nil {
		return 0, fmt.Errorf("runc state %s: %w", id, err)
	}
	var st struct{ Pid int }
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		return 0, fmt.Errorf("runc state %s: no pid in %s", id, out)
	}
	return st.Pid, nil
}

// containerMounts are the mount points and options of process pid's
// namespace, sorted.
func containerMounts(pid int) ([]string, error) {
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.Lines(string(mi)) {
		if f := strings.Fields(line); len(f) > 5 {
			out = append(out, f[4]+" "+f[5])
		}
	}
	slices.Sort(out)
	return out, nil
}

var fdNumbers = regexp.MustCompile(`\[[0-9]+\]`)

// openFDs are the descriptors process pid holds (number and what it
// refers to, inode numbers blanked; paths of this run's bundles as ID).
func openFDs(pid int) ([]string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		l = fdNumbers.ReplaceAllString(l, "[]")
		if strings.Contains(l, "nctk-load-") {
			l = filepath.Base(l) // the bundle's own files (exec.fifo, create.log)
			l = regexp.MustCompile(`nctk-load-[0-9]+-[-0-9]+`).ReplaceAllString(l, "ID")
		}
		out = append(out, e.Name()+" "+l)
	}
	slices.Sort(out)
	return out, nil
}

// runtimeProcesses lists the live processes of this load: nctk as this test
// run built it, and every process whose command line or cgroup names one
// of markers (the runc state directory, the container id prefix: runc,
// and a container's init, which runs as "runc init" in its cgroup).
func runtimeProcesses(markers ...string) []string {
	var out []string
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		cmdline, err := os.ReadFile(p + "/cmdline")
		if err != nil {
			continue
		}
		if st, err := os.ReadFile(p + "/stat"); err != nil || bytes.Contains(st, []byte(") Z ")) {
			continue // gone, or dead and not yet reaped by its new parent
		}
		cgroup, _ := os.ReadFile(p + "/cgroup")
		exe, _ := os.Readlink(p + "/exe")
		mine := binDir != "" && strings.HasPrefix(exe, binDir+"/")
		for _, m := range markers {
			mine = mine || bytes.Contains(cmdline, []byte(m)) || bytes.Contains(cgroup, []byte(m))
		}
		if mine {
			out = append(out, filepath.Base(p)+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	slices.Sort(out)
	return out
}

// TestLoadDocker is issue 13's docker load: size.dockerRuns concurrent
// `docker run` of the probe for each way docker asks for GPUs (the nvidia
// runtime, --gpus all, --gpus device=0), and without a GPU for comparison,
// against one private dockerd over a
// 2-GPU fixture driver; every container must see exactly its GPUs, the
// driver's libraries and a working CUDA probe, and afterwards no
// container, mount or nctk process may be left.
func TestLoadDocker(t *testing.T) {
	skipShort(t)
	e2e.RequireRoot(t)
	size := loadSizeFromEnv()
	const img = "nctk-e2e:load"
	host, d := startGPUDockerd(t, img, false)
	libDir := e2e.LayoutDebian.LibDir()
	run, _ := dockerProbe(d, img, libDir)
	mounts := mountsBelow(t, d.Dir)
	for _, p := range []struct {
		name string
		args []string
		gpus []int
	}{
		{"runtime=nvidia", []string{"--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=all"}, []int{0, 1}},
		{"gpus=all", []string{"--runtime=runc", "--gpus", "all"}, []int{0, 1}},
		{"gpus=device=0", []string{"--runtime=runc", "--gpus", "device=0"}, []int{0}},
		// The same load without a GPU: what dockerd, containerd and runc
		// take by themselves on this machine.
		{"runc (no GPU)", []string{"--runtime=runc"}, nil},
	} {
		t.Run(p.name, func(t *testing.T) {
			results := make([]e2e.Result, size.dockerRuns)
			var wg sync.WaitGroup
			start := time.Now()
			for i := range results {
				wg.Go(func() { results[i] = run(t, p.args...) })
			}
			wg.Wait()
			wall := time.Since(start)
			var took []time.Duration
			for i, res := range results {
				took = append(took, res.Duration)
				if !res.OK() {
					t.Errorf("run %d failed: %s", i, clip(res.String()))
					continue
				}
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					if p.gpus == nil {
						checkNoGPU(t, res.Stdout)
						return
					}
					checkGPU(t, res.Stdout, want{host: host, GPUs: p.gpus, LibDir: libDir})
				})
			}
			t.Logf("load: %d concurrent docker run %s in %v; per run: median %v, p90 %v, max %v",
				len(results), strings.Join(p.args, " "), wall.Round(time.Millisecond),
				percentile(took, 50).Round(time.Millisecond), percentile(took, 90).Round(time.Millisecond), percentile(took, 100).Round(time.Millisecond))
			checkNothingLeft(t, d, mounts)
		})
	}
}
