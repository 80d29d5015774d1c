package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/e2e"
)

// The probe is a shell script run as the container's process. It reports,
// in sections, everything the tests check: what cudaprobe and nvidia-smi
// say, the NVIDIA device nodes and whether the device cgroup lets them be
// opened, the cgroup's rules, the mount table, the image's ld.so.cache
// (through the host's static ldconfig, bind-mounted read-only at
// probeLdconfig: the image has none) and the /proc/driver/nvidia view.

// probeLdconfig is where the tests mount the host's (static) ldconfig in
// the container, to run `ldconfig -p` there.
const probeLdconfig = "/nctk-probe/ldconfig"

// hostLdconfig is the host's ldconfig (static-pie on Debian).
const hostLdconfig = "/sbin/ldconfig"

// probeScript is the container's shell script; libDir is the image's
// library directory.
func probeScript(libDir string) string {
	return `sec() { n=$1; shift; echo "@@@ $n"; "$@" 2>&1; echo "@@@ $n exit=$?"; }
sec cudaprobe cudaprobe
sec smi nvidia-smi
sec smil nvidia-smi -L
sec dev sh -c 'for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -e "$f" ] && stat -c "%n|%F|%t|%T" "$f"; done; true'
sec devopen sh -c 'for f in /dev/nvidia*; do [ -c "$f" ] || continue; e=$( (: <"$f") 2>&1 ) && echo "$f|opened" || echo "$f|$e"; done; true'
sec cgroup cat /sys/fs/cgroup/devices/devices.list
sec mountinfo cat /proc/self/mountinfo
sec ldcache ` + probeLdconfig + ` -p
sec procgpus ls /proc/driver/nvidia/gpus
sec files sh -c 'ls -l ` + libDir + ` /usr/bin | grep -i -E "nvidia|cuda"; true'
sec env env
`
}

// probe is the parsed output of probeScript.
type probe struct {
	raw  string
	out  map[string]string
	exit map[string]int
}

var sectionRE = regexp.MustCompile(`^@@@ (\S+)(?: exit=(\d+))?$`)

func parseProbe(out string) probe {
	p := probe{raw: out, out: map[string]string{}, exit: map[string]int{}}
	cur := ""
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		m := sectionRE.FindStringSubmatch(line)
		switch {
		case m != nil && m[2] == "":
			cur = m[1]
			b.Reset()
		case m != nil && m[1] == cur:
			p.out[cur] = b.String()
			p.exit[cur], _ = strconv.Atoi(m[2])
			cur = ""
		case cur != "":
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return p
}

// section returns a section's output; a missing section fails the test.
func (p probe) section(t testing.TB, name string) string {
	t.Helper()
	s, ok := p.out[name]
	if !ok {
		t.Fatalf("container output has no %q section:\n%s", name, p.raw)
	}
	return s
}

// devNode is a device node as seen in the container or on the host.
type devNode struct {
	Major, Minor uint32
}

func (d devNode) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// devices returns the character devices under /dev/nvidia* in the
// container by path.
func (p probe) devices(t testing.TB) map[string]devNode {
	t.Helper()
	devs := map[string]devNode{}
	for _, line := range lines(p.section(t, "dev")) {
		f := strings.Split(line, "|")
		if len(f) != 4 {
			t.Fatalf("bad dev line %q", line)
		}
		if f[1] != "character special file" {
			if f[1] != "directory" {
				t.Errorf("%s in the container is a %s, not a character device", f[0], f[1])
			}
			continue
		}
		maj, err1 := strconv.ParseUint(f[2], 16, 32)
		minor, err2 := strconv.ParseUint(f[3], 16, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad dev line %q", line)
		}
		devs[f[0]] = devNode{uint32(maj), uint32(minor)}
	}
	return devs
}

// cgroupRules returns the container's device cgroup (v1) rules.
func (p probe) cgroupRules(t testing.TB) []string {
	t.Helper()
	if p.exit["cgroup"] != 0 {
		t.Fatalf("reading devices.list in the container failed:\n%s", p.out["cgroup"])
	}
	return lines(p.section(t, "cgroup"))
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	Root, Point string
	// Opts are the per-mount options (field 6), Super the superblock's.
	Opts, Super []string
	FSType      string
}

func (m mountEntry) has(opt string) bool { return slices.Contains(m.Opts, opt) }

func (p probe) mounts(t testing.TB) []mountEntry {
	t.Helper()
	var ms []mountEntry
	for _, line := range lines(p.section(t, "mountinfo")) {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 7 || sep < 6 || len(f) < sep+3 {
			t.Fatalf("bad mountinfo line %q", line)
		}
		ms = append(ms, mountEntry{
			Root: unescape(f[3]), Point: unescape(f[4]), Opts: strings.Split(f[5], ","),
			FSType: f[sep+1], Super: strings.Split(f[len(f)-1], ","),
		})
	}
	return ms
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// hostDev returns the device number of a node in the fixture root's /dev.
func hostDev(t testing.TB, root, name string) devNode {
	t.Helper()
	var st unix.Stat_t
	p := filepath.Join(root, "dev", name)
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("fixture device node: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Fatalf("fixture %s is not a character device", p)
	}
	return devNode{unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))}
}

// want is what a GPU container must see.
type want struct {
	host *gpuHost
	// GPUs are the NVML indices of the selected GPUs (none for "none").
	GPUs []int
	// LibDir is the image's library directory.
	LibDir string
	// Display: the modeset node is expected too (ctr --gpus asks for every
	// capability).
	Display bool
	// NoCgroupCheck skips the device cgroup rules (containers whose device
	// cgroup the test cannot read).
	NoCgroupCheck bool
	// Extra names further nodes under the fixture's /dev the container
	// gets (a management spec's nvidia-caps/nvidia-capN).
	Extra []string
}

// wantDevices is the exact set of NVIDIA device nodes the container gets.
func (w want) devices(t testing.TB) map[string]devNode {
	t.Helper()
	root := w.host.Root.Path
	devs := map[string]devNode{}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		devs["/dev/"+n] = hostDev(t, root, n)
	}
	if w.Display {
		devs["/dev/nvidia-modeset"] = hostDev(t, root, "nvidia-modeset")
	}
	for _, n := range w.Extra {
		devs["/dev/"+n] = hostDev(t, root, n)
	}
	for _, i := range w.GPUs {
		g := w.host.gpu(t, i)
		name := fmt.Sprintf("nvidia%d", g.Minor)
		d := hostDev(t, root, name)
		if d != (devNode{195, uint32(g.Minor)}) {
			t.Fatalf("fixture /dev/%s is %s, want 195:%d", name, d, g.Minor)
		}
		devs["/dev/"+name] = d
	}
	return devs
}

// checkGPU asserts everything a GPU container must show: the driver's
// CUDA version through cudaprobe, nvidia-smi reaching NVML but no driver,
// exactly the selected device nodes with their numbers, a device cgroup that
// allows exactly those, read-only driver mounts, driver libraries in the
// image's ld.so.cache, the /proc/driver/nvidia view of the selected GPUs,
// and the files at the image's own paths.
func checkGPU(t *testing.T, out string, w want) {
	t.Helper()
	p := parseProbe(out)
	t.Run("cudaprobe", func(t *testing.T) {
		got := p.section(t, "cudaprobe")
		if !strings.Contains(got, fmt.Sprintf("cuDriverGetVersion: %d\n", cudaVersion535)) || p.exit["cudaprobe"] != 0 {
			t.Errorf("cudaprobe (exit %d) does not report CUDA %d:\n%s", p.exit["cudaprobe"], cudaVersion535, got)
		}
		if want := "libcuda: " + w.LibDir + "/libcuda.so.1"; !strings.Contains(got, want) {
			t.Errorf("cudaprobe did not load libcuda.so.1 from the image's lib dir (%s):\n%s", want, got)
		}
	})
	t.Run("nvidia-smi", func(t *testing.T) {
		for _, sec := range []string{"smi", "smil"} {
			got := p.section(t, sec)
			if strings.Contains(got, "libnvidia-ml") || strings.Contains(got, "not found") {
				t.Errorf("nvidia-smi did not load NVML:\n%s", got)
			}
			if !strings.Contains(got, "couldn't communicate with the NVIDIA driver") {
				t.Errorf("nvidia-smi (exit %d) should fail only for lack of a kernel driver:\n%s", p.exit[sec], got)
			}
		}
	})
	wantDevs := w.devices(t)
	t.Run("device nodes", func(t *testing.T) {
		got := p.devices(t)
		if !mapsEqual(got, wantDevs) {
			t.Errorf("NVIDIA device nodes in the container:\n got  %v\n want %v", sortedDevs(got), sortedDevs(wantDevs))
		}
		// Each node passes the device cgroup: opening it fails only
		// because there is no kernel driver (ENXIO), not with EPERM.
		for _, line := range lines(p.section(t, "devopen")) {
			path, res, _ := strings.Cut(line, "|")
			if _, ok := wantDevs[path]; !ok {
				continue
			}
			if res != "opened" && !strings.Contains(res, "No such device or address") {
				t.Errorf("opening %s in the container: %s (want ENXIO: the cgroup must allow it)", path, res)
			}
		}
	})
	if !w.NoCgroupCheck {
		t.Run("device cgroup", func(t *testing.T) {
			checkCgroup(t, p.cgroupRules(t), wantDevs)
		})
	}
	t.Run("mounts", func(t *testing.T) {
		checkMounts(t, p.mounts(t), w)
	})
	t.Run("ld.so.cache", func(t *testing.T) {
		got := p.section(t, "ldcache")
		for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
			re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(lib) + ` \(libc6,x86-64[^)]*\) => ` + regexp.QuoteMeta(w.LibDir+"/"+lib) + `$`)
			if !re.MatchString(got) {
				t.Errorf("ldconfig -p in the container does not list %s in %s:\n%s", lib, w.LibDir, got)
			}
		}
	})
	t.Run("proc view", func(t *testing.T) {
		// The view is a tmpfs over the container's /proc/driver/nvidia,
		// which exists only where the kernel module is loaded: without a
		// GPU the hook skips it (checkSpecEdit checks what it was asked
		// to show).
		if _, err := os.Stat("/proc/driver/nvidia"); err != nil {
			if p.exit["procgpus"] == 0 {
				t.Errorf("/proc/driver/nvidia/gpus exists in the container of a host without a driver:\n%s", p.out["procgpus"])
			}
			return
		}
		var wantBus []string
		for _, i := range w.GPUs {
			wantBus = append(wantBus, strings.ToLower(w.host.gpu(t, i).PCIAddress))
		}
		sort.Strings(wantBus)
		got := lines(strings.ToLower(p.section(t, "procgpus")))
		if len(wantBus) == 0 && p.exit["procgpus"] != 0 {
			got = nil // no GPU, no gpus directory
		}
		sort.Strings(got)
		if !slices.Equal(got, wantBus) {
			t.Errorf("/proc/driver/nvidia/gpus in the container lists %q, want %q", got, wantBus)
		}
	})
	t.Run("files", func(t *testing.T) {
		got := p.section(t, "files")
		for _, f := range []string{"libcuda.so.1 -> ", "libcuda.so.535", "libnvidia-ml.so.1 -> ", "nvidia-smi"} {
			if !strings.Contains(got, f) {
				t.Errorf("the image's %s and /usr/bin lack %q:\n%s", w.LibDir, f, got)
			}
		}
	})
	if t.Failed() {
		t.Logf("container output:\n%s", out)
	}
}

// checkCgroup asserts that the NVIDIA majors' rules are exactly the
// container's nodes, each readable and writable, and that nothing allows
// every device.
func checkCgroup(t *testing.T, rules []string, devs map[string]devNode) {
	t.Helper()
	majors := map[uint32]bool{}
	wantRules := map[string]bool{}
	for _, d := range devs {
		majors[d.Major] = true
		wantRules[fmt.Sprintf("c %d:%d", d.Major, d.Minor)] = true
	}
	got := map[string]bool{}
	for _, r := range rules {
		f := strings.Fields(r)
		if len(f) != 3 {
			t.Fatalf("bad devices.list line %q", r)
		}
		if f[0] == "a" || (f[1] == "*:*" && strings.Contains(f[2], "r")) {
			t.Errorf("device cgroup allows every device: %q", r)
			continue
		}
		maj, _, _ := strings.Cut(f[1], ":")
		if maj == "*" {
			continue
		}
		m, err := strconv.ParseUint(maj, 10, 32)
		if err != nil || !majors[uint32(m)] || f[0] != "c" {
			continue
		}
		key := f[0] + " " + f[1]
		if !strings.Contains(f[2], "r") || !strings.Contains(f[2], "w") {
			t.Errorf("rule %q does not allow read and write", r)
		}
		got[key] = true
	}
	if !mapsEqual(got, wantRules) {
		t.Errorf("device cgroup rules for the NVIDIA majors:\n got  %v\n want %v\nall rules:\n%s",
			sortedKeys(got), sortedKeys(wantRules), strings.Join(rules, "\n"))
	}
}

// checkMounts asserts that every mount of driver files is read-only,
// nosuid and nodev, that device mounts (if the path uses any) are nosuid,
// and that the essential driver files are there as mounts.
func checkMounts(t *testing.T, ms []mountEntry, w want) {
	t.Helper()
	driverRoot := w.host.Root.Path
	n := 0
	seen := map[string]bool{}
	for _, m := range ms {
		fromDriver := strings.HasPrefix(m.Root, driverRoot+"/") || isDriverPath(m.Point)
		if !fromDriver {
			continue
		}
		n++
		seen[m.Point] = true
		switch {
		case strings.HasPrefix(m.Point, "/dev/"):
			if !m.has("nosuid") || m.has("nodev") {
				t.Errorf("device mount %s has options %v (want nosuid, not nodev)", m.Point, m.Opts)
			}
		case strings.HasSuffix(m.Point, ".sock") || strings.HasSuffix(m.Point, "/socket"):
			// IPC sockets are writable by design.
		default:
			if !m.has("ro") || !m.has("nosuid") || !m.has("nodev") {
				t.Errorf("driver mount %s (from %s) has options %v, want ro,nosuid,nodev", m.Point, m.Root, m.Opts)
			}
		}
	}
	for _, f := range []string{w.LibDir + "/libcuda.so." + w.host.Root.Version, w.LibDir + "/libnvidia-ml.so." + w.host.Root.Version, "/usr/bin/nvidia-smi"} {
		if !seen[f] {
			t.Errorf("no mount at %s", f)
		}
	}
	if n < 5 {
		t.Errorf("only %d driver mounts in the container", n)
	}
}

// isDriverPath reports whether a mount point in the container is an
// NVIDIA driver path (library, binary, firmware, proc view, device, IPC).
func isDriverPath(p string) bool {
	base := filepath.Base(p)
	return strings.HasPrefix(base, "libnvidia") || strings.HasPrefix(base, "libcuda") ||
		strings.HasPrefix(base, "nvidia") || strings.HasPrefix(p, "/proc/driver/nvidia") ||
		strings.Contains(p, "/firmware/nvidia/") || strings.HasPrefix(base, "libnvcuvid") ||
		strings.HasPrefix(base, "libnvoptix")
}

// checkNoGPU asserts that the container got nothing: no driver library, no
// NVIDIA node, no driver mount.
func checkNoGPU(t *testing.T, out string) {
	t.Helper()
	p := parseProbe(out)
	if got := p.section(t, "cudaprobe"); !strings.Contains(got, e2e.CudaprobeNoDriver) {
		t.Errorf("cudaprobe found a driver in a container that asked for none:\n%s", got)
	}
	if devs := p.devices(t); len(devs) != 0 {
		t.Errorf("NVIDIA device nodes in a container that asked for none: %v", devs)
	}
	for _, m := range p.mounts(t) {
		if isDriverPath(m.Point) {
			t.Errorf("driver mount %s in a container that asked for none", m.Point)
		}
	}
	if t.Failed() {
		t.Logf("container output:\n%s", out)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func sortedDevs(m map[string]devNode) []string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v.String())
	}
	sort.Strings(s)
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// readFile returns a file's content, failing the test on error.
func readFile(t testing.TB, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
