package aftercreate

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/mountns"
	"github.com/nctk/nctk/internal/mountsrc"
	"github.com/nctk/nctk/internal/rootfs"
)

// createdContainer starts what a low-level runtime's create leaves: a
// process waiting in a mount namespace of its own, pivoted into a root (a
// tmpfs with a static busybox, /dev and, as a host with the driver loaded
// shows in the container's procfs, /proc/driver/nvidia with a params file).
// It returns the process's pid; the process is killed at cleanup.
func createdContainer(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (mount namespaces); running as uid %d", os.Geteuid())
	}
	var tools []string
	for _, name := range []string{"unshare", "pivot_root", "busybox"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s not found: %v", name, err)
		}
		tools = append(tools, p)
	}
	root := t.TempDir()
	script := `set -e
mount -t tmpfs none "$1"
cp "$3" "$1/busybox"
mkdir -p "$1/proc/driver/nvidia" "$1/dev" "$1/old"
echo "ModifyDeviceFiles: 1" > "$1/proc/driver/nvidia/params"
cd "$1"
"$2" . old
exec /busybox sh -c '/busybox umount -l /old && echo ready && exec /busybox sleep 1000'`
	cmd := exec.Command(tools[0], "-m", "--propagation", "private", "sh", "-c", script, "sh", root, tools[1], tools[2])
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("container not ready: %q %v", line, err)
	}
	return cmd.Process.Pid
}

// TestApply: in a created container the links, the view and the mask are
// made (seen through /proc/PID/root, which shows the container's mounts),
// nothing leaks into the host's namespace, and a failing step undoes the
// earlier ones.
func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		links   []hookargs.Link
		mask    bool
		wantErr string
	}{
		{name: "links, view, mask", links: []hookargs.Link{{Target: "../card1", Path: "/dev/dri/by-path/pci-0000:01:00.0-card"}}, mask: true},
		{name: "view only"},
		{name: "a link fails: nothing stays", links: []hookargs.Link{{Target: "../card1", Path: "/dev/dri/x"}, {Target: "y", Path: "/busybox/z"}},
			wantErr: "busybox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := createdContainer(t)
			host := e2e.FakeProcDriver(t, "0000:01:00.0", "0000:02:00.0")
			w := Work{DevLinks: tt.links, Proc: &rootfs.ProcView{HostDir: host, Files: []string{"params", "version"}, GPUDirs: []string{"0000:01:00.0"}}}
			if tt.mask {
				w.ParamsHostDir = host
			}
			p, err := Prepare(w, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			err = p.Apply(pid, nil)
			in := "/proc/" + strconv.Itoa(pid) + "/root"
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Apply: %v, want an error naming %q", err, tt.wantErr)
				}
				// The view is gone (the image's params again), no link left.
				if data, _ := os.ReadFile(in + "/proc/driver/nvidia/params"); string(data) != "ModifyDeviceFiles: 1\n" {
					t.Errorf("params after a failed Apply: %q", data)
				}
				if _, err := os.Lstat(in + "/dev/dri/x"); err == nil {
					t.Error("link left after a failed Apply")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(in + "/proc/driver/nvidia/params")
			if err != nil || !strings.Contains(string(data), "ModifyDeviceFiles: 0\n") {
				t.Errorf("params in the container: %q, %v", data, err)
			}
			entries, _ := os.ReadDir(in + "/proc/driver/nvidia/gpus")
			var gpus []string
			for _, e := range entries {
				gpus = append(gpus, e.Name())
			}
			if !slices.Equal(gpus, []string{"0000:01:00.0"}) {
				t.Errorf("gpus in the container: %q", gpus)
			}
			if err := os.WriteFile(in+"/proc/driver/nvidia/x", nil, 0o644); err == nil {
				t.Error("the view is writable")
			}
			for _, l := range tt.links {
				if got, err := os.Readlink(in + l.Path); err != nil || got != l.Target {
					t.Errorf("link %s: %q, %v", l.Path, got, err)
				}
			}
			// Where the mask and the view are mounted: the container's
			// mount table has them, ours not.
			mounts, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
			want := 1
			if tt.mask {
				want = 2
			}
			if n := strings.Count(string(mounts), " /proc/driver/nvidia"); n < want {
				t.Errorf("container mount table has %d mounts at or below /proc/driver/nvidia, want %d:\n%s", n, want, mounts)
			}
			self, _ := os.ReadFile("/proc/self/mountinfo")
			if strings.Contains(string(self), host) {
				t.Error("a mount of the host's proc dir shows in the runtime's namespace")
			}
		})
	}
}

// TestApplyRefuses: a pid that is not a created container's init.
func TestApplyRefuses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	p, err := Prepare(Work{DevLinks: []hookargs.Link{{Target: "a", Path: "/dev/b"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		pid  int
		want string
	}{
		{0, "invalid pid"},
		{os.Getpid(), "shares the runtime's mount namespace"},
		{1 << 30, "no such file"},
	} {
		if err := p.Apply(tt.pid, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Apply(%d): %v, want %q", tt.pid, err, tt.want)
		}
	}
}

// TestApplyMounts: the mounts are made in the created container, read-only
// and in more batches than the first (the later ones opened in the
// runtime's namespace), none in the runtime's; a source that cannot be
// opened in a later batch undoes every mount and placeholder made before it.
func TestApplyMounts(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "all", true: "a later source is missing"}[fail], func(t *testing.T) {
			pid := createdContainer(t)
			host := t.TempDir()
			n := 2*mountsrc.MaxBatch + 3
			var w Work
			ro := []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
			for i := range n {
				src := fmt.Sprintf("%s/libnvidia-x%d.so.580.1", host, i)
				if !fail || i != n-2 {
					if err := os.WriteFile(src, []byte(strconv.Itoa(i)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				w.Mounts = append(w.Mounts, Mount{Source: src, Destination: "/usr/lib/x86_64-linux-gnu/" + filepath.Base(src), Kind: rootfs.KindFile, Options: ro})
			}
			if err := os.MkdirAll(host+"/fw", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("fw", host+"/fwlink"); err != nil {
				t.Fatal(err)
			}
			w.Mounts = append(w.Mounts, Mount{Source: host + "/fwlink", Destination: "/lib/firmware/nvidia", Kind: rootfs.KindAny, Options: ro})
			p, err := Prepare(w, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			err = p.Apply(pid, nil)
			in := "/proc/" + strconv.Itoa(pid) + "/root"
			mounts, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
			got := strings.Count(string(mounts), " /usr/lib/x86_64-linux-gnu/libnvidia-x")
			if fail {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("libnvidia-x%d.so.580.1", n-2)) {
					t.Fatalf("Apply: %v, want the missing source named", err)
				}
				if got != 0 {
					t.Errorf("%d mounts left after a failed Apply", got)
				}
				if _, err := os.Lstat(in + "/usr/lib/x86_64-linux-gnu/libnvidia-x0.so.580.1"); err == nil {
					t.Error("a placeholder left after a failed Apply")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != n {
				t.Errorf("container mount table has %d of the %d library mounts", got, n)
			}
			for _, i := range []int{0, n - 1} {
				f := fmt.Sprintf("%s/usr/lib/x86_64-linux-gnu/libnvidia-x%d.so.580.1", in, i)
				if data, err := os.ReadFile(f); err != nil || string(data) != strconv.Itoa(i) {
					t.Errorf("%s: %q, %v", f, data, err)
				}
				if err := os.WriteFile(f, nil, 0o644); err == nil {
					t.Errorf("%s is writable", f)
				}
			}
			if st, err := os.Stat(in + "/lib/firmware/nvidia"); err != nil || !st.IsDir() {
				t.Errorf("the firmware directory (a symlink on the host): %v, %v", st, err)
			}
			self, _ := os.ReadFile("/proc/self/mountinfo")
			if strings.Contains(string(self), "libnvidia-x") {
				for _, l := range strings.Split(string(self), "\n") {
					if strings.Contains(l, "libnvidia-x0.") {
						t.Log(l)
					}
				}
				t.Error("a library mount shows in the runtime's namespace")
			}
		})
	}
}

// TestRollbackInContainer: in a created container's namespace, where the
// root is the thread's own and /proc is not the runtime's, a rollback
// unmounts what was mounted there: a tmpfs (the /proc/driver/nvidia view's
// kind) and an attached file.
func TestRollbackInContainer(t *testing.T) {
	pid := createdContainer(t)
	nsfd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsfd)
	host := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(host, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := rootfs.OpenSource(host, rootfs.KindFile, []string{"ro", "nosuid", "nodev"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	th, err := mountns.Enter(nsfd)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	mounts := func() string {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
		return string(data)
	}
	// The mounts are looked at from here: the thread in the container's
	// namespace has no /proc of this process.
	var r *rootfs.Root
	err = th.Do(func() error {
		var err error
		if r, err = rootfs.Open("/"); err != nil {
			return err
		}
		if err := r.MountTmpfs("/view", rootfs.Tmpfs{Files: []rootfs.TmpfsFile{{Name: "params", Data: []byte("ModifyDeviceFiles: 0\n"), Mode: 0o444}}}); err != nil {
			return err
		}
		return r.Attach(src, "/lib/libx.so")
	})
	if err != nil {
		t.Fatal(err)
	}
	if m := mounts(); !strings.Contains(m, " /view ") || !strings.Contains(m, " /lib/libx.so ") {
		t.Errorf("mounts not made:\n%s", m)
	}
	if err := th.Do(func() error { return errors.Join(r.Rollback(), r.Close()) }); err != nil {
		t.Fatal(err)
	}
	if m := mounts(); strings.Contains(m, " /view ") || strings.Contains(m, " /lib/libx.so ") {
		t.Errorf("mounts left after the rollback:\n%s", m)
	}
}
