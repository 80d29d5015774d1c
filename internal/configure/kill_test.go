package configure

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/mountsrc"
	"github.com/nctk/nctk/internal/plan"
)

// applyEnvVar makes the test binary apply the job in the named JSON file
// to its container and exit (see runApply): a configure run that a test
// can kill.
const applyEnvVar = "NCTK_CONFIGURE_TEST_APPLY"

// applyJob is what runApply applies.
type applyJob struct {
	Plan      *plan.Plan
	Options   Options
	Container Container
}

func runApply(jobFile string) int {
	data, err := os.ReadFile(jobFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var job applyJob
	if err := json.Unmarshal(data, &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	before := fdSize()
	if err := Apply(context.Background(), job.Plan, job.Container, job.Options); err != nil {
		fmt.Fprintf(os.Stderr, "nvidia-container-cli: %v\n", err)
		return 1
	}
	// The size the process's descriptor table had and reached (it never
	// shrinks): TestApplyDescriptorTable.
	fmt.Printf("FDSize %s -> %s\n", before, fdSize())
	return 0
}

// fdSize is the size of the process's descriptor table (/proc/self/status).
func fdSize() string {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "FDSize:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// nsProcess is a container's init: a process in a private copy of our
// mount namespace, as runc makes it before pivot_root.
type nsProcess struct{ cmd *exec.Cmd }

func startNS(t *testing.T) *nsProcess {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	must(t, cmd.Start())
	return &nsProcess{cmd: cmd}
}

// stop ends the process and with it the namespace and its mounts, as the
// engine tears down a container whose hook failed.
func (n *nsProcess) stop() {
	n.cmd.Process.Kill()
	n.cmd.Wait()
}

// killRig holds a plan over a fake driver and an image to apply it to.
type killRig struct {
	t    *testing.T
	self string
	plan *plan.Plan
	opts Options
	// compat is the content of a newer compat libcuda the image holds
	// (nil: none; then ld.so.cache is written in process).
	compat []byte
}

// image makes a Debian-like image root with an ld.so.cache of its own
// making and a driver link name that is a symlink to something else (so
// that configure replaces a link, through a temporary name).
func (k *killRig) image() string {
	t := k.t
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"/etc/ld.so.conf.d", "/dev", "/proc", "/usr/bin", "/usr/lib/x86_64-linux-gnu"} {
		must(t, os.MkdirAll(root+d, 0o755))
	}
	for p, c := range map[string]string{"/etc/debian_version": "12.5\n", "/etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
		"/etc/ld.so.conf.d/x86_64-linux-gnu.conf": "/usr/lib/x86_64-linux-gnu\n"} {
		must(t, os.WriteFile(root+p, []byte(c), 0o644))
	}
	must(t, os.Symlink("libz.so.0", root+"/usr/lib/x86_64-linux-gnu/libz.so"))
	if k.compat != nil {
		must(t, os.MkdirAll(root+CompatDir, 0o755))
		must(t, os.WriteFile(root+CompatDir+"/libcuda.so.580.65.06", k.compat, 0o755))
	}
	return root
}

// command is a configure run (the test binary as runApply) on the
// container pid whose root is root.
func (k *killRig) command(pid int, root string) *exec.Cmd {
	job, err := json.Marshal(applyJob{Plan: k.plan, Options: k.opts, Container: Container{PID: pid, Rootfs: root}})
	must(k.t, err)
	f := filepath.Join(k.t.TempDir(), "job.json")
	must(k.t, os.WriteFile(f, job, 0o600))
	cmd := exec.Command(k.self)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", applyEnvVar + "=" + f}
	return cmd
}

// configure runs a configure on a fresh container over root to its end
// and returns what the container sees: the host view of the rootfs (the
// mount points, links, ld.so.cache, drop-in) and its mounts below it.
func (k *killRig) configure(root string) (tree, mounts map[string]string) {
	k.t.Helper()
	ns := startNS(k.t)
	defer ns.stop()
	cmd := k.command(ns.cmd.Process.Pid, root)
	if out, err := cmd.CombinedOutput(); err != nil {
		k.t.Fatalf("configure %s: %v: %s", root, err, out)
	}
	return e2e.TreeState(k.t, root), mountsUnder(k.t, fmt.Sprintf("/proc/%d/mountinfo", ns.cmd.Process.Pid), root)
}

// TestKillThenRetry is issue 13's kill test for configure (the --gpus
// path): a configure SIGKILLed at a random point, its container then torn
// down (as the engine does when the hook fails) and the container started
// again on the same rootfs (docker start reuses it) must be configured by
// the next run exactly as a run that was never interrupted: the same mount
// points, links and ld.so.cache bytes in the rootfs, no temporary file,
// the same mounts. A restart of a container that was never interrupted
// gives the same again.
func TestKillThenRetry(t *testing.T) {
	requireRoot(t)
	self, err := os.Executable()
	must(t, err)
	d := newDriver(t)
	lib, err := os.ReadFile(d.lib)
	must(t, err)
	budget := 10 * time.Second
	if testing.Short() {
		budget = 2 * time.Second
	}
	for _, tt := range []struct {
		name   string
		compat bool
	}{
		{"ld.so.cache in process", false},
		// A newer compat libcuda in the image: the host ldconfig runs,
		// confined to the root, and can be killed with configure.
		{"compat ldconfig", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := &killRig{t: t, self: self, plan: d.plan(), opts: Options{NoCgroups: true}}
			if tt.compat {
				k.compat = lib
				k.plan.Mounts[0].Destination = "/usr/lib/x86_64-linux-gnu/libcuda.so.535.1"
				k.opts.CUDACompatMode, k.opts.DriverVersion = CompatLdconfig, "535.261.03"
			}
			k.killThenRetry(budget)
		})
	}
}

// killThenRetry kills configure runs at random points for budget, each on
// a fresh image, and checks that the next run on the same rootfs gives a
// clean run's result.
func (k *killRig) killThenRetry(budget time.Duration) {
	t := k.t
	clean := k.image()
	pristine := e2e.TreeState(t, clean)
	start := time.Now()
	want, wantMounts := k.configure(clean)
	span := time.Since(start)
	if _, ok := want["/etc/ld.so.cache"]; !ok {
		t.Fatalf("a clean configure wrote no ld.so.cache: %v", want)
	}
	if len(wantMounts) < 4 {
		t.Fatalf("a clean configure mounted too little to test: %v", wantMounts)
	}
	// A second configure on the clean run's rootfs is a restart of a
	// container that was never interrupted (docker start reuses the
	// layer): the same rootfs and mounts again.
	restart, restartMounts := k.configure(clean)
	if !maps.Equal(restartMounts, wantMounts) {
		t.Fatalf("a second configure on a clean run's rootfs mounted\n%v\nwant\n%v", restartMounts, wantMounts)
	}
	if d := treeDiff(restart, want); len(d) > 0 {
		t.Fatalf("a second configure on a clean run's rootfs left another rootfs: %v", d)
	}
	var runs, partial, temps int
	for deadline := time.Now().Add(budget); time.Now().Before(deadline); runs++ {
		root := k.image()
		ns := startNS(t)
		cmd := k.command(ns.cmd.Process.Pid, root)
		must(t, cmd.Start())
		time.Sleep(time.Duration(rand.Int64N(int64(span) + 1)))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		ns.stop()
		mid := e2e.TreeState(t, root)
		if !maps.Equal(mid, pristine) && !maps.Equal(mid, want) {
			partial++
		}
		for p := range mid {
			if strings.Contains(filepath.Base(p), ".nctk-") || strings.HasSuffix(p, "~") {
				temps++
				break
			}
		}
		got, gotMounts := k.configure(root)
		if !maps.Equal(got, want) {
			t.Fatalf("run %d: the configure after a kill left another rootfs than a clean one:\n%v\nthe kill had left (against the image):\n%v\nwant\n%v",
				runs, treeDiff(got, want), treeDiff(mid, pristine), want)
		}
		if !maps.Equal(gotMounts, wantMounts) {
			t.Fatalf("run %d: the configure after a kill mounted\n%v\nwant\n%v", runs, gotMounts, wantMounts)
		}
		os.RemoveAll(filepath.Dir(root))
	}
	t.Logf("%d kills within %v of the start; %d left the rootfs partly edited, %d left temp files; every retry matched a clean configure", runs, span, partial, temps)
}

// treeDiff lists what differs between two trees.
func treeDiff(got, want map[string]string) []string {
	var d []string
	for p, g := range got {
		if w, ok := want[p]; !ok {
			d = append(d, "extra "+p+" "+g)
		} else if g != w {
			d = append(d, "differs "+p+": "+g+" want "+w)
		}
	}
	for p := range want {
		if _, ok := got[p]; !ok {
			d = append(d, "missing "+p)
		}
	}
	return d
}

// TestApplyDescriptorTable: a configure keeps its descriptors below 64,
// the size a process's descriptor table starts with. Past it the kernel
// grows the table the Go runtime's threads share and waits for an RCU grace
// period to do so: 11–12 ms each on a 16-vCPU VM, twice per create on the
// H100 host before the journal kept one descriptor per directory (not per
// entry) and named attached mounts by their ID (not by a held clone), the
// sources gave up their path descriptors once cloned, and sources were
// opened in batches sized to the descriptors left. Plans: the H100 host's
// (17 mounts, 4 nodes, 18 links), 8 GPUs with the compute, utility and
// video files (22, 12, 20), and every capability on 8 GPUs (48, 16, 48).
func TestApplyDescriptorTable(t *testing.T) {
	requireRoot(t)
	self, err := os.Executable()
	must(t, err)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("bash not found: %v", err)
	}
	for _, tt := range []struct {
		name          string
		mounts, nodes int
		// dirs spreads the added files over that many new directories
		// (graphics files land in a dozen); gpus is the proc view's.
		dirs, gpus int
	}{
		{"one GPU", 17, 4, 0, 1},
		{"8 GPUs", 22, 12, 0, 8},
		{"8 GPUs, every capability", 48, 16, 12, 8},
		{"16 GPUs, every capability", 56, 20, 12, 16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(t)
			p := d.plan()
			ro := p.Mounts[0].Options
			p.Proc.GPUDirs = nil
			for i := range tt.gpus {
				bus := fmt.Sprintf("00000000:%02x:00.0", i+0x10)
				must(t, os.MkdirAll(d.proc+"/gpus/"+bus, 0o755))
				p.Proc.GPUDirs = append(p.Proc.GPUDirs, bus)
			}
			for i := range tt.mounts - len(p.Mounts) {
				dir := "/usr/lib/x86_64-linux-gnu"
				if tt.dirs > 0 {
					dir = fmt.Sprintf("/usr/share/nvidia-x%d/d", i%tt.dirs)
				}
				lib := filepath.Join(d.dir, fmt.Sprintf("libnvidia-x%d.so.580.1", i))
				must(t, os.Link(d.lib, lib))
				p.Mounts = append(p.Mounts, plan.Mount{Source: lib, Destination: dir + "/" + filepath.Base(lib), Kind: plan.KindFile, Options: ro})
				p.Symlinks = append(p.Symlinks, plan.Symlink{Link: dir + fmt.Sprintf("/libnvidia-x%d.so.1", i), Target: filepath.Base(lib)})
			}
			for i := range tt.nodes - len(p.Devices) {
				p.Devices = append(p.Devices, plan.Device{Path: fmt.Sprintf("/dev/nvidia%d", i+1), HostPath: "/dev/null", Major: 1, Minor: 3})
			}
			k := &killRig{t: t, self: self, plan: p, opts: Options{NoCgroups: true}}
			ns := startNS(t)
			defer ns.stop()
			root := k.image()
			// Through a shell that closes every descriptor but the
			// standard three and then forks it: a child's descriptor table
			// is sized for what its parent has open, and this test process
			// may hold many (some inherited).
			cmd := k.command(ns.cmd.Process.Pid, root)
			cmd.Args = []string{"bash", "-c", `for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && exec {fd}>&-; done 2>/dev/null; "$0"; exit $?`, cmd.Path}
			cmd.Path = bash
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("configure: %v: %s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != "FDSize 64 -> 64" {
				t.Errorf("descriptor table before and after configure: %q, want 64 -> 64 (each growth waits for an RCU grace period)", got)
			}
			mounts := mountsUnder(t, fmt.Sprintf("/proc/%d/mountinfo", ns.cmd.Process.Pid), root)
			for _, m := range p.Mounts {
				if _, ok := mounts[m.Destination]; !ok {
					t.Errorf("%s not mounted", m.Destination)
				}
			}
			for _, dv := range p.Devices {
				if _, ok := mounts[dv.Path]; !ok {
					t.Errorf("%s not mounted", dv.Path)
				}
			}
		})
	}
}

// TestApplyBatchFailureRollsBack: a source that cannot be opened in a later
// batch (a batch is at most mountsrc.MaxBatch sources) fails the configure
// after the earlier batches were attached, and the rollback leaves the
// image as it was: no mount, no placeholder, no link.
func TestApplyBatchFailureRollsBack(t *testing.T) {
	requireRoot(t)
	self, err := os.Executable()
	must(t, err)
	d := newDriver(t)
	p := d.plan()
	ro := p.Mounts[0].Options
	missing := mountsrc.MaxBatch + 20
	for i := range missing + 8 {
		lib := filepath.Join(d.dir, fmt.Sprintf("libnvidia-x%d.so.580.1", i))
		if i != missing { // this one is missing on the host
			must(t, os.Link(d.lib, lib))
		}
		p.Mounts = append(p.Mounts, plan.Mount{Source: lib, Destination: "/usr/lib/x86_64-linux-gnu/" + filepath.Base(lib), Kind: plan.KindFile, Options: ro})
	}
	k := &killRig{t: t, self: self, plan: p, opts: Options{NoCgroups: true}}
	ns := startNS(t)
	defer ns.stop()
	root := k.image()
	pristine := e2e.TreeState(t, root)
	out, err := k.command(ns.cmd.Process.Pid, root).CombinedOutput()
	want := fmt.Sprintf("nvidia-container-cli: mount error: open mount source %s: no such file or directory", filepath.Join(d.dir, fmt.Sprintf("libnvidia-x%d.so.580.1", missing)))
	if err == nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("configure with a missing source: %v: %q, want %q", err, out, want)
	}
	if m := mountsUnder(t, fmt.Sprintf("/proc/%d/mountinfo", ns.cmd.Process.Pid), root); len(m) != 0 {
		t.Errorf("mounts left after the failed configure: %v", m)
	}
	if got := e2e.TreeState(t, root); !maps.Equal(got, pristine) {
		t.Errorf("image changed by the failed configure:\nbefore %v\nafter  %v", pristine, got)
	}
}
