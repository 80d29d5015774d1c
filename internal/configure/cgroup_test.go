package configure

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const mountinfoV1 = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 30 0:31 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
36 30 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 22 0:40 / /mnt/with\040space rw - cgroup2 cgroup2 rw
`

func TestParseProcCgroup(t *testing.T) {
	got, err := parseProcCgroup([]byte("5:devices:/docker/abc\n4:cpu,cpuacct:/x\n0::/user.slice\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Path != "/docker/abc" || got[1].Controllers[1] != "cpuacct" || got[2].ID != "0" || got[2].Controllers != nil {
		t.Errorf("parse = %+v", got)
	}
	for _, bad := range []string{"garbage", "1:net_cls", "x:devices:/a", "1:devices:relative", ":devices:/a"} {
		if _, err := parseProcCgroup([]byte(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("parseProcCgroup(%q) = %v, want an error naming line 1", bad, err)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	got, err := parseMountinfo([]byte(mountinfoV1))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[2].MountPoint != "/sys/fs/cgroup/devices" || got[2].FSType != "cgroup" ||
		got[2].SuperOpts[1] != "devices" || got[4].MountPoint != "/mnt/with space" ||
		got[0].ID != 22 || got[0].Dev != "254:0" || got[0].Source != "/dev/vda" {
		t.Errorf("parse = %+v", got)
	}
	for _, bad := range []string{"1 2 3", "1 2 0:1 / /x rw no-separator here", "1 2 0:1 / /x rw - ", "x 2 0:1 / /x rw - ext4 /dev/a rw"} {
		if _, err := parseMountinfo([]byte(bad)); err == nil {
			t.Errorf("parseMountinfo(%q) succeeded", bad)
		}
	}
	if u := unescapeOctal(`a\134b\1`); u != `a\b\1` {
		t.Errorf("unescape = %q", u)
	}
}

func TestFindDeviceCgroup(t *testing.T) {
	tests := []struct {
		name      string
		cgroup    string
		mountinfo string
		procRoot  string
		want      cgroupDir
		err       string
	}{
		{"v1", "5:devices:/docker/abc\n0::/\n", mountinfoV1, "", cgroupDir{1, "/sys/fs/cgroup/devices/docker/abc"}, ""},
		{"v1 standalone", "5:devices:/docker/abc\n", mountinfoV1, "/rootfs", cgroupDir{1, "/rootfs/sys/fs/cgroup/devices/docker/abc"}, ""},
		{"v2", "0::/system.slice/docker-abc.scope\n", mountinfoV1, "", cgroupDir{2, "/mnt/with space/system.slice/docker-abc.scope"}, ""},
		{"v1 mount root prefix", "5:devices:/kubepods/pod1/c1\n",
			"35 30 0:31 /kubepods /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n", "",
			cgroupDir{1, "/sys/fs/cgroup/devices/pod1/c1"}, ""},
		{"v1 root is the cgroup", "5:devices:/kubepods\n",
			"35 30 0:31 /kubepods /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n", "",
			cgroupDir{1, "/sys/fs/cgroup/devices"}, ""},
		{"not below the mount root", "5:devices:/other/c1\n",
			"35 30 0:31 /kubepods /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n", "", cgroupDir{}, "not below any"},
		{"mount root outside namespace", "5:devices:/c1\n",
			"35 30 0:31 /.. /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n", "", cgroupDir{}, "outside this cgroup namespace"},
		{"cgroup outside namespace", "0::/../../x\n", mountinfoV1, "", cgroupDir{}, "not below any"},
		{"no devices mount", "5:devices:/a\n", "22 1 254:0 / / rw - ext4 /dev/vda rw\n", "", cgroupDir{}, "cgroup subsystem devices not found"},
		{"no entries", "4:memory:/a\n", mountinfoV1, "", cgroupDir{}, "no devices or unified cgroup entries found"},
		{"malformed", "1:net_cls\n", mountinfoV1, "", cgroupDir{}, "malformed cgroup entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findDeviceCgroup([]byte(tt.cgroup), parsedMounts(t, tt.mountinfo), tt.procRoot)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// An image's symlink on the way to the cgroup directory (standalone mode)
// resolves inside the rootfs, never to the host's cgroup tree.
func TestFindDeviceCgroupStandaloneSymlink(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/", filepath.Join(root, "sys")); err != nil {
		t.Fatal(err)
	}
	got, err := findDeviceCgroup([]byte("5:devices:/docker/abc\n"), parsedMounts(t, mountinfoV1), root)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "fs/cgroup/devices/docker/abc"); got.Dir != want {
		t.Errorf("dir = %s, want %s (inside the rootfs)", got.Dir, want)
	}
}

func TestDevicesList(t *testing.T) {
	tests := []struct {
		list string
		rule deviceRule
		want bool
	}{
		{"a *:* rwm\n", deviceRule{195, 0}, true},
		{"c 195:* rwm\n", deviceRule{195, 3}, true},
		{"c 195:0 rw\n", deviceRule{195, 0}, true},
		{"c 195:0 r\n", deviceRule{195, 0}, false},
		{"c 195:1 rw\nb 195:0 rw\n", deviceRule{195, 0}, false},
		{"c 1:3 rwm\nc 5:* rwm\n", deviceRule{195, 255}, false},
		{"", deviceRule{195, 255}, false},
		{"junk line\nc x\n", deviceRule{1, 1}, false},
	}
	for _, tt := range tests {
		if got := parseDevicesList([]byte(tt.list)).allows(tt.rule); got != tt.want {
			t.Errorf("%q allows %v = %v, want %v", tt.list, tt.rule, got, tt.want)
		}
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte("5:devices:/docker/abc\n0::/\n"))
	f.Add([]byte("1:name=systemd:/\n"))
	f.Add([]byte("::\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseProcCgroup(data)
		if err == nil {
			for _, e := range entries {
				if !strings.HasPrefix(e.Path, "/") {
					t.Fatalf("entry path %q not absolute", e.Path)
				}
			}
		}
	})
}

func FuzzFindDeviceCgroup(f *testing.F) {
	f.Add([]byte("5:devices:/docker/abc\n"), []byte(mountinfoV1))
	f.Add([]byte("0::/a/../../b\n"), []byte(mountinfoV1))
	f.Add([]byte("5:devices:/a\n"), []byte("35 30 0:31 / /../../etc rw - cgroup cgroup rw,devices\n"))
	f.Add([]byte("5:devices:/a\n"), []byte("35 30 0:31 /a\\040b /x rw - cgroup cgroup rw,devices\n"))
	f.Add([]byte("0:devices:/"), []byte("0 0 0 / / 0 - cgroup 0 devices")) // the root itself is inside it
	f.Fuzz(func(t *testing.T, cg, mi []byte) {
		mounts, err := parseMountinfo(mi)
		if err != nil {
			return
		}
		d, err := findDeviceCgroup(cg, mounts, "/p")
		if err == nil && d.Dir != "/p" && !strings.HasPrefix(d.Dir, "/p/") {
			t.Fatalf("cgroup dir %q outside the proc root", d.Dir)
		}
	})
}

func BenchmarkFindDeviceCgroup(b *testing.B) {
	cg := []byte("12:pids:/docker/abc\n5:devices:/docker/abc\n0::/\n")
	mi := parsedMounts(b, strings.Repeat("22 1 254:0 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw\n", 50)+mountinfoV1)
	for b.Loop() {
		if _, err := findDeviceCgroup(cg, mi, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzDevicesList(f *testing.F) {
	f.Add([]byte("a *:* rwm\n"), uint32(195), uint32(0))
	f.Add([]byte("c 195:* rw\nb 8:0 r\n"), uint32(195), uint32(3))
	f.Add([]byte("c :\n"), uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, major, minor uint32) {
		l := parseDevicesList(data)
		if l.allows(deviceRule{major, minor}) && !strings.Contains(string(data), "w") {
			t.Fatalf("%q grants write access without a w", data)
		}
	})
}

// parsedMounts parses a mountinfo text the test wrote.
func parsedMounts(t testing.TB, data string) []mountEntry {
	t.Helper()
	m, err := parseMountinfo([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// findDeviceCgroup is resolveDeviceCgroup on an unparsed /proc/PID/cgroup.
func findDeviceCgroup(cgroupData []byte, mounts []mountEntry, procRoot string) (cgroupDir, error) {
	entries, err := parseProcCgroup(cgroupData)
	if err != nil {
		return cgroupDir{}, err
	}
	want, version, err := deviceCgroupEntry(entries)
	if err != nil {
		return cgroupDir{}, err
	}
	return resolveDeviceCgroup(want, version, mounts, procRoot)
}

// TestStandardDeviceCgroup: the device cgroup of a process in a cgroup of
// its own is found where hosts mount it, without the mount table, and is
// the directory the mount table gives; a layout that is not the standard
// one (another root, a cgroup the process is not in) falls back to the
// mount table, which then decides.
func TestStandardDeviceCgroup(t *testing.T) {
	requireRoot(t)
	proc, err := openProcDir("")
	must(t, err)
	defer proc.Close()
	data, err := proc.readFile("self/cgroup")
	must(t, err)
	entries, err := parseProcCgroup(data)
	must(t, err)
	e, version, err := deviceCgroupEntry(entries)
	if err != nil {
		t.Skipf("no device cgroup here: %v", err)
	}
	hier := "/sys/fs/cgroup"
	if version == 1 {
		hier = "/sys/fs/cgroup/devices"
	}
	name := fmt.Sprintf("nctk-test-%d", os.Getpid())
	own := filepath.Join(hier, e.Path, name)
	other := own + "-other"
	for _, d := range []string{own, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("cannot make a cgroup at %s: %v", d, err)
		}
		t.Cleanup(func() { os.Remove(d) })
	}
	cmd := exec.Command("sleep", "1000")
	must(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	must(t, os.WriteFile(filepath.Join(own, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0))
	selfMounts := func() ([]mountEntry, error) {
		data, err := proc.readFile("self/mountinfo")
		if err != nil {
			return nil, err
		}
		return parseMountinfo(data)
	}
	var tableReads int
	counted := func() ([]mountEntry, error) { tableReads++; return selfMounts() }

	cg, err := lookupDeviceCgroup(proc, "", pid, counted, cgroupMountRoot)
	must(t, err)
	cg.Close()
	if cg.Dir != own || cg.Version != version || tableReads != 0 {
		t.Errorf("standard layout: %+v after %d mount table reads; want %s (v%d) and none", cg.cgroupDir, tableReads, own, version)
	}
	// Another root: not a cgroup file system; the mount table decides.
	cg, err = lookupDeviceCgroup(proc, "", pid, counted, t.TempDir())
	must(t, err)
	cg.Close()
	if cg.Dir != own || tableReads != 1 {
		t.Errorf("non-standard layout: %+v after %d mount table reads; want %s from the table", cg.cgroupDir, tableReads, own)
	}
	// The right hierarchy, a cgroup the process is not in: refused.
	oe := e
	oe.Path = path.Join(e.Path, name+"-other")
	if cg := standardDeviceCgroup(cgroupMountRoot, oe, version, pid); cg != nil {
		cg.Close()
		t.Errorf("a cgroup without the process was taken: %+v", cg.cgroupDir)
	}
	if cg := standardDeviceCgroup(cgroupMountRoot, cgroupEntry{Path: "/../" + name}, version, pid); cg != nil {
		cg.Close()
		t.Errorf("a path out of the hierarchy was taken: %+v", cg.cgroupDir)
	}
}
