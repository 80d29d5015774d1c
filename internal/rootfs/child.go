package rootfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaybeRunChild runs the sandbox child this package re-executes itself as
// when args (os.Args) ask for one, and then exits the process; otherwise it
// returns false at once. Call it first thing in main and in TestMain of
// tests that use RunLdconfig.
func MaybeRunChild(args []string) bool {
	if len(args) < 2 || args[1] != childLdconfig {
		return false
	}
	if len(args) != 3 {
		fmt.Fprintf(os.Stderr, "nctk-ldconfig: usage: %s %s CONFIG\n", args[0], childLdconfig)
		os.Exit(2)
	}
	err := runLdconfigChild(args[2])
	// Only reached on failure: success replaces this process by ldconfig.
	fmt.Fprintf(os.Stderr, "nctk-ldconfig: %v\n", err)
	os.Exit(1)
	return true
}

// childFd is the descriptor the sealed ldconfig copy arrives on.
const childFd = 3

// aliveFd is the read end of the parent's liveness pipe (sandboxCommand).
const aliveFd = 4

// childParentAlive reports whether the parent still holds the liveness
// pipe's write end: nothing is ever written, so a readable pipe or a
// hang-up is its end of file.
func childParentAlive() bool {
	fds := []unix.PollFd{{Fd: aliveFd, Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 0
	}
}

// keptCaps are the capabilities ldconfig keeps: enough to write the cache
// and links in an image whose files root does not own (user-namespaced
// rootfs), nothing that reaches outside files.
func keptCaps() []uintptr {
	return []uintptr{unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER}
}

// runLdconfigChild is the sandbox: it runs in fresh mount, PID, IPC, UTS and
// network namespaces (set up by the parent's clone flags), confines itself
// to the container root and executes the sealed ldconfig.
func runLdconfigChild(arg string) error {
	// Capability, no_new_privs and exec changes are per thread: do all of
	// them on this one.
	runtime.LockOSThread()
	// Nothing is changed before this look: a child whose parent died
	// before it could set its parent-death signal stops here.
	if !childParentAlive() {
		return errors.New("the calling process is gone; not running ldconfig")
	}
	if _, err := unix.FcntlInt(aliveFd, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fmt.Errorf("liveness descriptor: %w", err)
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		return fmt.Errorf("bad configuration: %w", err)
	}
	if cfg.Root == "" || !strings.HasPrefix(cfg.Root, "/") {
		return fmt.Errorf("bad container root %q", cfg.Root)
	}
	if err := enterRoot(cfg); err != nil {
		return err
	}
	maskSystemDirs()
	if err := prepareConf(); err != nil {
		return err
	}
	argv := append([]string{"ldconfig", "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"}, cfg.Dirs...)
	// Allocate before the address-space limit is set.
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return err
	}
	envvp, err := syscall.SlicePtrFromStrings([]string{})
	if err != nil {
		return err
	}
	if _, err := unix.FcntlInt(childFd, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fmt.Errorf("ldconfig copy descriptor: %w", err)
	}
	if err := confine(); err != nil {
		return err
	}
	return execveat(childFd, argvp, envvp)
}

// enterRoot makes the container root this process's "/": the mount tree is
// made private (nothing propagates back), the root is bind-mounted onto
// itself (pivot_root needs a mount point), checked to be the directory the
// parent saw, and pivoted into (or moved and chrooted into).
func enterRoot(cfg childConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount(cfg.Root, cfg.Root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind container root %s: %w", cfg.Root, err)
	}
	if err := unix.Chdir(cfg.Root); err != nil {
		return fmt.Errorf("enter container root %s: %w", cfg.Root, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(".", &st); err != nil {
		return fmt.Errorf("stat container root %s: %w", cfg.Root, err)
	}
	if st.Dev != cfg.Dev || st.Ino != cfg.Ino {
		return fmt.Errorf("container root %s changed under us", cfg.Root)
	}
	if !cfg.NoPivot {
		err := unix.PivotRoot(".", ".")
		if err == nil {
			if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
				return fmt.Errorf("detach old root: %w", err)
			}
			return unix.Chdir("/")
		}
		if err != unix.EINVAL {
			return fmt.Errorf("pivot_root into %s: %w", cfg.Root, err)
		}
		// EINVAL: the current root is not a mount (initramfs); move instead.
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move container root %s: %w", cfg.Root, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot into %s: %w", cfg.Root, err)
	}
	return unix.Chdir("/")
}

// maskSystemDirs covers the container's /proc, /sys and /dev (when they are
// real directories) with empty read-only tmpfs: ldconfig needs none of them,
// and the container's procfs would otherwise show host-side processes of
// this namespace set.
func maskSystemDirs() {
	for _, p := range []string{"/proc", "/sys", "/dev"} {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		// Best effort: a failure leaves a directory ldconfig ignores anyway.
		_ = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=555")
	}
}

// prepareConf makes sure /etc exists (ldconfig writes the cache there); the
// configuration drop-ins were written by the caller (Ldconfig.Run). The
// process is already confined: every path resolves inside the container
// root.
func prepareConf() error {
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return fmt.Errorf("create /etc: %w", err)
	}
	return nil
}

// confine sets resource limits, drops every capability from the bounding
// and ambient sets except keptCaps, clears the inheritable set and sets
// no_new_privs, on this thread (the one that executes ldconfig).
func confine() error {
	limits := []struct {
		res int
		max uint64
	}{
		{unix.RLIMIT_CPU, 10},           // seconds
		{unix.RLIMIT_AS, 2 << 30},       // address space
		{unix.RLIMIT_FSIZE, 32 << 20},   // largest file it may write (the cache)
		{unix.RLIMIT_NOFILE, 64},        // descriptors
		{unix.RLIMIT_CORE, 0},           // no core dumps of a host binary in the image
		{unix.RLIMIT_MEMLOCK, 64 << 10}, // locked memory
	}
	for _, l := range limits {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.max, Max: l.max}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", l.res, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	keep := map[uintptr]bool{}
	for _, c := range keptCaps() {
		keep[c] = true
	}
	for c := uintptr(0); c <= 63; c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
			if err == unix.EINVAL {
				break // past the kernel's last capability
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	var mask [2]uint32
	for _, c := range keptCaps() {
		mask[c/32] |= 1 << (c % 32)
	}
	for i := range data {
		data[i].Inheritable = 0
		data[i].Permitted &= mask[i]
		data[i].Effective &= mask[i]
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// execveat executes the file open at fd (AT_EMPTY_PATH) with argv and envv;
// it does not return on success. No /proc is needed.
func execveat(fd int, argvp, envvp []*byte) error {
	var empty byte
	_, _, errno := syscall.RawSyscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(&empty)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envvp[0])), unix.AT_EMPTY_PATH, 0)
	return fmt.Errorf("execute ldconfig: %w", errno)
}
