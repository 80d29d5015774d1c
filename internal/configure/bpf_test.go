package configure

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

func TestDeviceFilterShape(t *testing.T) {
	insns := deviceFilter([]deviceRule{{195, 0}, {195, 255}}, nil)
	// prologue 6 + 2 rules * 8 + labelled fall-through + return
	if len(insns) != 6+16+2 {
		t.Fatalf("%d instructions:\n%v", len(insns), insns)
	}
	if err := insns.Marshal(new(bytes.Buffer), binary.LittleEndian); err != nil {
		t.Fatalf("marshal: %v", err)
	}
	old := asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}
	withOld := deviceFilter([]deviceRule{{1, 3}}, old)
	if withOld[len(withOld)-2].OpCode != old[0].OpCode || withOld[len(withOld)-1].OpCode != old[1].OpCode {
		t.Errorf("old program not appended: %v", withOld)
	}
}

// cgroup2 mounts a cgroup2 hierarchy (hybrid hosts allow it next to v1)
// and returns a fresh child cgroup directory.
func cgroup2(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	mnt := t.TempDir()
	if err := unix.Mount("cgroup2", mnt, "cgroup2", 0, ""); err != nil {
		t.Skipf("cannot mount a cgroup2 hierarchy on this kernel (%v); the BPF program builder is unit-tested only", err)
	}
	dir := filepath.Join(mnt, fmt.Sprintf("nctk-test-%d", os.Getpid()))
	must(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() {
		os.Remove(dir)
		unix.Unmount(mnt, unix.MNT_DETACH)
	})
	return dir
}

// loadFilter attaches a runc-like default-deny program allowing rules.
func loadFilter(t *testing.T, dir string, rules []deviceRule) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.CGroupDevice,
		AttachType:   ebpf.AttachCGroupDevice,
		Instructions: deviceFilter(rules, nil),
		License:      "Apache",
	})
	must(t, err)
	fd, err := openCgroupDir(dir)
	must(t, err)
	defer unix.Close(fd)
	must(t, attach(fd, p))
	t.Cleanup(func() { p.Close() })
	return p
}

// canOpen reports, per device path, whether a process in the cgroup at dir
// may open it for reading and writing.
func canOpen(t *testing.T, dir string, devs ...string) map[string]bool {
	t.Helper()
	cfd, err := openCgroupDir(dir)
	must(t, err)
	defer unix.Close(cfd)
	script := ""
	for _, d := range devs {
		script += fmt.Sprintf("if (exec 3<>%s) 2>&-; then echo %s=yes; else echo %s=no; fi; ", d, d, d)
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cfd}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe in cgroup: %v", err)
	}
	res := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(l, "=")
		res[k] = v == "yes"
	}
	return res
}

// TestAllowDevicesV2 runs the real kernel check: a cgroup whose runtime
// program allows only /dev/zero gets /dev/null added, keeps /dev/zero and
// still denies /dev/full; Revert restores the original program.
func TestAllowDevicesV2(t *testing.T) {
	dir := cgroup2(t)
	// Without any program, every device is allowed: nothing to change.
	ch, err := allowDevicesV2Path(dir, []deviceRule{{1, 3}})
	must(t, err)
	if _, ok := ch.(noChange); !ok {
		t.Errorf("a cgroup without device programs was changed: %T", ch)
	}
	loadFilter(t, dir, []deviceRule{{1, 5}}) // /dev/zero only
	before := canOpen(t, dir, "/dev/null", "/dev/zero", "/dev/full")
	if before["/dev/null"] || !before["/dev/zero"] || before["/dev/full"] {
		t.Fatalf("test filter not effective: %v", before)
	}
	ch, err = allowDevicesV2Path(dir, []deviceRule{{1, 3}})
	must(t, err)
	after := canOpen(t, dir, "/dev/null", "/dev/zero", "/dev/full")
	if !after["/dev/null"] || !after["/dev/zero"] || after["/dev/full"] {
		t.Errorf("after adding 1:3: %v, want null and zero allowed, full denied", after)
	}
	fd, _ := openCgroupDir(dir)
	n := attachedCount(t, fd)
	unix.Close(fd)
	if n != 1 {
		t.Errorf("%d programs attached, want 1 (the old one replaced)", n)
	}
	must(t, ch.Revert())
	reverted := canOpen(t, dir, "/dev/null", "/dev/zero", "/dev/full")
	if reverted["/dev/null"] || !reverted["/dev/zero"] {
		t.Errorf("after revert: %v, want the original policy", reverted)
	}
}

// TestAllowDevicesV2Multi: with two programs attached (both must allow),
// each is extended.
func TestAllowDevicesV2Multi(t *testing.T) {
	dir := cgroup2(t)
	loadFilter(t, dir, []deviceRule{{1, 5}, {1, 7}})
	loadFilter(t, dir, []deviceRule{{1, 5}})
	ch, err := allowDevicesV2Path(dir, []deviceRule{{1, 3}})
	must(t, err)
	defer ch.Release()
	got := canOpen(t, dir, "/dev/null", "/dev/zero", "/dev/full")
	if !got["/dev/null"] || !got["/dev/zero"] || got["/dev/full"] {
		t.Errorf("got %v", got)
	}
}

func attachedCount(t *testing.T, fd int) int {
	t.Helper()
	res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: ebpf.AttachCGroupDevice})
	must(t, err)
	return len(res.Programs)
}

// allowDevicesV2Path opens the cgroup at dir and runs allowDevicesV2 on it.
func allowDevicesV2Path(dir string, rules []deviceRule) (cgroupChange, error) {
	fd, err := openCgroupDir(dir)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return allowDevicesV2(fd, dir, rules)
}
