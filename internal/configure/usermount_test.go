package configure

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// mountInContainer runs mount(8) with args in the container's namespace,
// as the engine mounts a user's volume before the prestart hook runs.
func mountInContainer(t *testing.T, c *container, args ...string) {
	t.Helper()
	argv := append([]string{"-t", fmt.Sprint(c.pid), "-m", "mount"}, args...)
	if out, err := exec.Command("nsenter", argv...).CombinedOutput(); err != nil {
		t.Fatalf("nsenter %v: %v: %s", argv, err, out)
	}
}

// TestApplyUserMount replays issue 13 for configure (the --gpus path): a
// user volume over the image's library directory got the driver files'
// mount points created in the host directory. Apply refuses, naming the
// path, the mount and its host directory, before anything changes; the
// host directory stays byte for byte as it was. A tmpfs the engine made
// (not a host directory), a volume elsewhere, and a host /dev bound with
// the nodes already in it are no obstacle.
func TestApplyUserMount(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skipf("nsenter (util-linux) not installed: %v", err)
	}
	libdir := "/usr/lib/x86_64-linux-gnu"
	tests := []struct {
		name    string
		dst     string // where the volume goes ("" for none)
		tmpfs   bool   // an engine tmpfs instead of a host directory
		files   []string
		refused string // the start of the path named in the error, "" when Apply works
		// viaLink: the rootfs is named through a symlink (mountinfo
		// shows the real path).
		viaLink bool
		// devLink: the plan has a GPU's /dev/dri/by-path link (left to
		// the host's /dev when that is bound in, made in the engine's
		// /dev otherwise).
		devLink bool
	}{
		{name: "volume over the lib dir", dst: libdir, refused: libdir + "/libz.so.1"},
		{name: "volume over the lib dir, rootfs named through a symlink", dst: libdir, refused: libdir + "/libz.so.1", viaLink: true},
		{name: "volume over /usr", dst: "/usr", refused: libdir + "/libz.so.1"},
		{name: "volume over /etc", dst: "/etc", refused: "/etc/ld.so.cache"},
		{name: "host /dev without the nodes", dst: "/dev", refused: "/dev/nvidia0"},
		{name: "host /dev with the nodes", dst: "/dev", files: []string{"nvidia0", "nvidiactl"}},
		{name: "host /dev with the nodes, a /dev link", dst: "/dev", files: []string{"nvidia0", "nvidiactl"}, devLink: true},
		{name: "engine /dev, a /dev link", dst: "/dev", tmpfs: true, devLink: true},
		{name: "tmpfs over the lib dir", dst: libdir, tmpfs: true},
		{name: "volume elsewhere", dst: "/data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startContainer(t, false)
			d := newDriver(t)
			p := d.plan()
			p.Proc = nil
			const link = "/dev/dri/by-path/pci-0000:01:00.0-card"
			if tt.devLink {
				p.DevSymlinks = []plan.Symlink{{Link: link, Target: "../card1"}}
			}
			host := filepath.Join(t.TempDir(), "vol")
			must(t, os.MkdirAll(host, 0o755))
			must(t, os.WriteFile(filepath.Join(host, "user-data"), []byte("mine"), 0o600))
			for _, f := range tt.files {
				must(t, os.WriteFile(filepath.Join(host, f), nil, 0o644))
			}
			must(t, os.MkdirAll(c.rootfs+tt.dst, 0o755))
			if tt.tmpfs {
				mountInContainer(t, c, "-t", "tmpfs", "tmpfs", c.rootfs+tt.dst)
			} else {
				mountInContainer(t, c, "--bind", host, c.rootfs+tt.dst)
			}
			hostBefore := e2e.TreeState(t, host)
			rootBefore := e2e.TreeState(t, c.rootfs)
			mountsBefore := c.mounts(t)

			rootPath := c.rootfs
			if tt.viaLink {
				rootPath = filepath.Join(t.TempDir(), "link")
				must(t, os.Symlink(c.rootfs, rootPath))
			}
			err := Apply(context.Background(), p, Container{PID: c.pid, Rootfs: rootPath}, Options{NoCgroups: true})

			if got := e2e.TreeState(t, host); !maps.Equal(got, hostBefore) {
				t.Errorf("host directory changed:\n%v\nwas\n%v", got, hostBefore)
			}
			if tt.refused == "" {
				must(t, err)
				if tt.devLink && tt.tmpfs {
					// In the container's namespace, where the engine's tmpfs is.
					if got, err := os.Readlink(fmt.Sprintf("/proc/%d/root%s%s", c.pid, c.rootfs, link)); err != nil || got != "../card1" {
						t.Errorf("link in the engine's /dev: %q, %v", got, err)
					}
				}
				return
			}
			var ue *plan.UserMountError
			var pe *phase.Error
			if !errors.As(err, &ue) || !errors.As(err, &pe) || pe.Phase != phase.Mount {
				t.Fatalf("Apply = %v, want a mount error wrapping a UserMountError", err)
			}
			if !strings.HasPrefix(ue.Path, tt.refused) || !strings.HasSuffix(ue.Destination, tt.dst) || ue.Source != host {
				t.Errorf("error = %+v, want path %s, mount %s of %s", ue, tt.refused, tt.dst, host)
			}
			if msg := err.Error(); !strings.Contains(msg, host) || !strings.Contains(msg, tt.dst) || !strings.Contains(msg, "mount the volume elsewhere") {
				t.Errorf("error does not name the mount: %s", msg)
			}
			if got := e2e.TreeState(t, c.rootfs); !maps.Equal(got, rootBefore) {
				t.Errorf("rootfs changed by a refused Apply:\n%v\nwas\n%v", got, rootBefore)
			}
			if got := c.mounts(t); !maps.Equal(got, mountsBefore) {
				t.Errorf("mounts changed by a refused Apply: %v, was %v", got, mountsBefore)
			}
		})
	}
}

// TestMountTables: which mounts below the rootfs are host file systems,
// and the host path each shows.
func TestMountTables(t *testing.T) {
	const root = "/var/lib/docker/overlay2/abc/merged"
	host := "22 1 254:0 / / rw - ext4 /dev/vda rw\n" +
		"30 22 0:40 / /tmp rw - tmpfs tmpfs rw\n" +
		"31 22 0:50 / " + root + " rw - overlay overlay rw\n" +
		"32 22 254:1 /vol /srv/data rw - ext4 /dev/vdb rw\n"
	ctr := host +
		"40 31 254:0 /home/u/lib " + root + "/usr/lib/x86_64-linux-gnu rw - ext4 /dev/vda rw\n" +
		"41 31 0:60 / " + root + "/dev rw - tmpfs tmpfs rw\n" +
		"42 31 0:40 /x " + root + "/opt rw - tmpfs tmpfs rw\n" +
		"43 31 0:61 / " + root + "/proc rw - proc proc rw\n" +
		"44 31 254:1 /vol/sub " + root + "/data rw - ext4 /dev/vdb rw\n" +
		"45 31 254:9 /r " + root + "/weird rw - ext4 /dev/vdz rw\n"
	tab, err := newMountTables([]byte(ctr+"46 22 254:9 /other /mnt/z rw - ext4 /dev/vdz rw\n"), root)
	must(t, err)
	tests := []struct {
		id   uint64
		host string // "" when not a host file system
	}{
		{40, "/home/u/lib"},
		{41, ""}, // the engine's tmpfs
		{42, "/tmp/x"},
		{43, ""}, // procfs
		{44, "/srv/data/sub"},
		{45, "/dev/vdz:/r"}, // shared, but not below any root the host mounts
	}
	for _, tt := range tests {
		src, ok := tab.hostSource(tab.byID[tt.id])
		if ok != (tt.host != "") || src != tt.host {
			t.Errorf("mount %d: hostSource = %q, %v; want %q", tt.id, src, ok, tt.host)
		}
	}
	for mp, below := range map[string]bool{root: false, root + "/usr/lib": true, root + "x/y": false, "/": false} {
		if got := tab.belowRootfs(mp); got != below {
			t.Errorf("belowRootfs(%s) = %v, want %v", mp, got, below)
		}
	}
	if m, ok := tab.byPath("/usr/lib/x86_64-linux-gnu/sub"); !ok || m.ID != 40 {
		t.Errorf("byPath(lib dir) = %+v, %v; want mount 40", m, ok)
	}
	if m, ok := tab.byPath("/etc"); !ok || m.ID != 31 {
		t.Errorf("byPath(/etc) = %+v, %v; want the rootfs mount 31", m, ok)
	}
}

// FuzzNewMountTables: any mount table parses or fails cleanly, and every
// mount's host source is a decision, never a panic.
func FuzzNewMountTables(f *testing.F) {
	f.Add([]byte("22 1 254:0 / / rw - ext4 /dev/vda rw\n40 31 254:0 /home/u/lib /r/usr/lib rw - ext4 /dev/vda rw\n"), "/r")
	f.Add([]byte("2 1 0:1 /../y / rw - ext4 a rw\n1 1 0:1 /.. /r/x rw - ext4 a rw\n"), "/r/")
	f.Fuzz(func(t *testing.T, ctr []byte, root string) {
		tab, err := newMountTables(ctr, root)
		if err != nil {
			return
		}
		for _, m := range tab.container {
			tab.hostSource(m)
			tab.byPath(m.MountPoint)
		}
	})
}

// TestCheckUserMountsReadsTablesWhenNeeded: the mount tables are read only
// when a planned path lies on a mount other than the container root's (each
// such path asks), and then once.
func TestCheckUserMountsReadsTablesWhenNeeded(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "usr/lib"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "opt"), 0o755))
	proc, err := openProcDir("")
	must(t, err)
	defer proc.Close()
	src := newMountSource(proc, Container{PID: os.Getpid(), Rootfs: dir})
	reads := 0
	seen := map[*mountTables]bool{}
	tables := func() (*mountTables, error) {
		reads++
		t, err := src.mountTables()
		seen[t] = true
		return t, err
	}
	paths := []plannedPath{{path: "/usr/lib/libcuda.so.1"}, {path: "/usr/lib/libnvidia-ml.so.1"}, {path: "/etc/ld.so.cache"}}
	check := func() error {
		r, err := rootfs.Open(dir)
		must(t, err)
		defer r.Close()
		_, err = checkUserMounts(r, tables, paths)
		return err
	}
	must(t, check())
	if reads != 0 {
		t.Errorf("all paths on the root's mount: %d table reads, want none", reads)
	}
	// An engine tmpfs over /opt and /usr/lib: looked up in the tables
	// (read once), not a host file system, so no error.
	for _, d := range []string{"opt", "usr/lib"} {
		m := filepath.Join(dir, d)
		must(t, unix.Mount("tmpfs", m, "tmpfs", 0, ""))
		defer unix.Unmount(m, unix.MNT_DETACH)
	}
	paths = append(paths, plannedPath{path: "/opt/x"})
	must(t, check())
	if reads != 3 || len(seen) != 1 {
		t.Errorf("three paths below two tmpfs mounts: %d table asks (want 3), %d tables read (want 1)", reads, len(seen))
	}
}

// TestMountSourceErrors: a mount table that cannot be read or parsed is a
// *mountTableError (Apply reports it as the container's phase, not as a
// failed mount), asked once.
func TestMountSourceErrors(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "7"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "self"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "7/mountinfo"), []byte("not a mount table\n"), 0o644))
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	proc := &procDir{fd: fd, path: dir}
	defer proc.Close()
	src := newMountSource(proc, Container{PID: 7, Rootfs: "/r"})
	_, err = src.mountTables()
	if _, ok := errors.AsType[*mountTableError](err); !ok || !strings.Contains(err.Error(), "7/mountinfo") {
		t.Errorf("malformed container table: %v, want a *mountTableError naming the file", err)
	}
	if _, again := src.mountTables(); again != err {
		t.Errorf("asked again: %v, want the same error", again)
	}
	_, err = src.selfMounts() // self/mountinfo missing
	if _, ok := errors.AsType[*mountTableError](err); !ok {
		t.Errorf("missing caller's table: %v, want a *mountTableError", err)
	}
}
