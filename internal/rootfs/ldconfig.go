package rootfs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// childLdconfig is argv[1] of the re-executed ldconfig sandbox child.
const childLdconfig = "__nctk-ldconfig"

// Ldconfig is the host's ldconfig binary, opened in the host's mount
// namespace, and run as a sealed in-memory copy: what is executed is a copy
// of the file opened when it was prepared, which nothing (least of all the
// container) can modify. The copy is made on the first Run: most creates
// prepare it (the image might ship CUDA compat libraries) and never run it,
// and copying ~1 MB into a memfd and freeing it cost ~2 ms of every such
// create.
type Ldconfig struct {
	path  string
	src   *os.File // the host file, until the copy is made
	memfd *os.File
}

// PrepareLdconfig opens the host ldconfig at hostPath and checks it is a
// regular file of a plausible size. Call it in the host's mount namespace;
// Run copies it.
func PrepareLdconfig(hostPath string) (*Ldconfig, error) {
	f, err := os.OpenFile(hostPath, os.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open ldconfig: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat ldconfig %s: %w", hostPath, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("ldconfig %s: not a regular file", hostPath)
	}
	if st.Size() > maxLdconfigSize {
		f.Close()
		return nil, fmt.Errorf("ldconfig %s: implausibly large (%d bytes)", hostPath, st.Size())
	}
	return &Ldconfig{path: hostPath, src: f}, nil
}

const maxLdconfigSize = 64 << 20

// sealed returns the sealed memfd copy of the file, making it first.
func (l *Ldconfig) sealed() (*os.File, error) {
	if l.memfd != nil {
		return l.memfd, nil
	}
	if l.src == nil {
		return nil, errors.New("run ldconfig: not prepared")
	}
	fd, err := unix.MemfdCreate("nctk-ldconfig", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if err == unix.EINVAL {
		// Kernels before 6.3 do not know MFD_EXEC (memfds are executable).
		fd, err = unix.MemfdCreate("nctk-ldconfig", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("copy ldconfig %s: memfd_create: %w", l.path, err)
	}
	mf := os.NewFile(uintptr(fd), "memfd:nctk-ldconfig")
	// From the start whatever an earlier failed copy read, and at most the
	// size checked when prepared (one byte more shows a file that grew); a
	// LimitReader of the file keeps the kernel's in-place copy.
	if _, err := l.src.Seek(0, io.SeekStart); err != nil {
		mf.Close()
		return nil, fmt.Errorf("copy ldconfig %s: %w", l.path, err)
	}
	if n, err := io.Copy(mf, io.LimitReader(l.src, maxLdconfigSize+1)); err != nil || n > maxLdconfigSize {
		mf.Close()
		if err == nil {
			err = errors.New("implausibly large")
		}
		return nil, fmt.Errorf("copy ldconfig %s: %w", l.path, err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals|unix.F_SEAL_EXEC); err != nil {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			mf.Close()
			return nil, fmt.Errorf("seal ldconfig copy of %s: %w", l.path, err)
		}
	}
	l.src.Close()
	l.src, l.memfd = nil, mf
	return mf, nil
}

// Close releases the file and its copy.
func (l *Ldconfig) Close() error {
	if l == nil {
		return nil
	}
	var err error
	if l.src != nil {
		err = l.src.Close()
		l.src = nil
	}
	if l.memfd != nil {
		err = errors.Join(err, l.memfd.Close())
		l.memfd = nil
	}
	return err
}

// LdconfigOptions configure a confined ldconfig run.
type LdconfigOptions struct {
	// Ldconfig is the absolute host path of the ldconfig binary to copy
	// and run (config.Ldconfig.HostPath resolves a configured one). Used
	// by RunLdconfig only, which requires it.
	Ldconfig string
	// NoPivot uses MS_MOVE+chroot instead of pivot_root (rootfs on ramfs).
	// pivot_root failing with EINVAL falls back to it anyway.
	NoPivot bool
	// ConfDropIn writes /etc/ld.so.conf.d/00-nctk.conf listing the
	// directories (and creates /etc/ld.so.conf including ld.so.conf.d when
	// the image has none), so that a later ldconfig run by the container
	// keeps them, and /etc/ld.so.conf.d/zz-nctk-system.conf listing the
	// image's own system directories (imageSystemDirs), which the host's
	// ldconfig would not search otherwise (as NVIDIA's update-ldcache
	// does), and the musl loader's path file in a musl image; all written
	// by the caller, inside the root (Root.writeLdconfigConf, as
	// RebuildLdCache writes them), before the sandbox starts. Used for CDI
	// specs, whose library directories are host paths the image's loader
	// may not search.
	ConfDropIn bool
	// Timeout bounds the run (default 30s).
	Timeout time.Duration
	// Exe is the binary re-executed as the sandbox child; "" means
	// /proc/self/exe (this binary, which must call MaybeRunChild).
	Exe string
	// Log receives ldconfig's output at debug level (nil: discarded).
	Log *slog.Logger
}

// childConfig is passed to the sandbox child as argv[2].
type childConfig struct {
	Root    string   `json:"root"`
	Dev     uint64   `json:"dev"`
	Ino     uint64   `json:"ino"`
	NoPivot bool     `json:"noPivot,omitempty"`
	Dirs    []string `json:"dirs"`
}

// RunLdconfig runs the host's ldconfig at opts.Ldconfig confined to the
// container root at rootPath (a path in the caller's mount namespace) over
// dirs: `ldconfig -f /etc/ld.so.conf -C /etc/ld.so.cache DIR…`, which
// rebuilds the container's ld.so.cache and creates the libraries' SONAME
// links.
func RunLdconfig(ctx context.Context, rootPath string, dirs []string, opts LdconfigOptions) error {
	if !path.IsAbs(opts.Ldconfig) {
		return fmt.Errorf("run ldconfig: %q is not an absolute host path", opts.Ldconfig)
	}
	l, err := PrepareLdconfig(opts.Ldconfig)
	if err != nil {
		return err
	}
	defer l.Close()
	return l.Run(ctx, rootPath, dirs, opts)
}

// Run runs the sealed ldconfig confined to the container root at rootPath
// (a path in the calling thread's mount namespace; the child's namespaces
// are copies of that thread's).
func (l *Ldconfig) Run(ctx context.Context, rootPath string, dirs []string, opts LdconfigOptions) error {
	if l == nil {
		return errors.New("run ldconfig: not prepared")
	}
	if err := checkLibDirs(dirs); err != nil {
		return fmt.Errorf("run ldconfig: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(rootPath, &st); err != nil {
		return fmt.Errorf("run ldconfig: container root %s: %w", rootPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("run ldconfig: container root %s is not a directory", rootPath)
	}
	if opts.ConfDropIn {
		if err := writeConf(rootPath, dirs, opts.Log); err != nil {
			return fmt.Errorf("run ldconfig: %w", err)
		}
	}
	cfg, err := json.Marshal(childConfig{Root: rootPath, Dev: st.Dev, Ino: st.Ino, NoPivot: opts.NoPivot, Dirs: dirs})
	if err != nil {
		return fmt.Errorf("run ldconfig: %w", err)
	}
	exeCopy, err := l.sealed()
	if err != nil {
		return err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The child is PID 1 of its own PID namespace, killed when this
	// thread dies (Pdeathsig). If this process is killed before the child
	// has set that, the child's own check cannot tell (its parent lies
	// outside its namespace: getppid is 0), and an orphan would go on to
	// change the container root after its configure was killed, under a
	// retry. So the child also holds the read end of a pipe whose only
	// write end is ours, and starts with a look at it (childParentAlive):
	// end of file means we are gone.
	aliveR, aliveW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("run ldconfig: %w", err)
	}
	defer aliveW.Close()
	defer aliveR.Close()
	var out limitedBuffer
	out.max = 64 << 10
	cmd := sandboxCommand(ctx, opts.Exe, cfg, exeCopy, aliveR)
	cmd.Stdout = &out
	cmd.Stderr = &out
	err = cmd.Run()
	output := strings.TrimSpace(out.String())
	if opts.Log != nil && output != "" {
		opts.Log.Debug("ldconfig output", "ldconfig", l.path, "root", rootPath, "output", output)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if output != "" {
			return fmt.Errorf("process %s failed in container root %s: %w: %s", l.path, rootPath, err, lastLines(output, 5))
		}
		return fmt.Errorf("process %s failed in container root %s: %w", l.path, rootPath, err)
	}
	return nil
}

// writeConf writes the configuration files of ConfDropIn in the container
// root at rootPath (Root.writeLdconfigConf, inside the root), before the
// sandbox runs ldconfig over them.
func writeConf(rootPath string, dirs []string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := Open(rootPath)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.writeLdconfigConf(dirs, log); err != nil {
		return errors.Join(err, r.Rollback())
	}
	r.Commit()
	return nil
}

// sandboxCommand is the sandbox child's command: exe (default
// /proc/self/exe) re-executed as nctk-ldconfig with cfg, the sealed
// ldconfig copy as fd 3 and alive, the parent-liveness pipe, as fd 4; new
// mount, PID, IPC, UTS and network namespaces; no environment.
func sandboxCommand(ctx context.Context, exe string, cfg []byte, exeCopy, alive *os.File) *exec.Cmd {
	if exe == "" {
		exe = "/proc/self/exe"
	}
	cmd := exec.CommandContext(ctx, exe, childLdconfig, string(cfg))
	cmd.Args[0] = "nctk-ldconfig"
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdin = nil
	cmd.ExtraFiles = []*os.File{exeCopy, alive}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// ProbeSystemDirs returns the directories the host's ldconfig at hostPath
// (an absolute host path) searches on its own, after those of its
// configuration: its built-in system directories, in its order. It runs
// that ldconfig once over a new empty directory (-r: it chroots there, so
// nothing outside is read or written; -N -X: it writes nothing), which
// names each of them in its complaint that it does not exist there.
func ProbeSystemDirs(ctx context.Context, hostPath string) ([]string, error) {
	if !path.IsAbs(hostPath) {
		return nil, fmt.Errorf("probe ldconfig: %q is not an absolute host path", hostPath)
	}
	empty, err := os.MkdirTemp("", "nctk-ldconfig-probe-")
	if err != nil {
		return nil, fmt.Errorf("probe ldconfig %s: %w", hostPath, err)
	}
	defer os.Remove(empty)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hostPath, "-r", empty, "-v", "-N", "-X",
		"-f", "/nonexistent/ld.so.conf", "-C", "/nonexistent/ld.so.cache")
	cmd.Env = []string{"LC_ALL=C"}
	cmd.Dir = "/"
	var out limitedBuffer
	out.max = 64 << 10
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	dirs := systemDirsFromProbe(out.String())
	if len(dirs) == 0 {
		if runErr != nil {
			return nil, fmt.Errorf("probe ldconfig %s: %w: %s", hostPath, runErr, lastLines(strings.TrimSpace(out.String()), 5))
		}
		return nil, fmt.Errorf("probe ldconfig %s: no system directory in its output: %s", hostPath, lastLines(strings.TrimSpace(out.String()), 5))
	}
	return dirs, nil
}

// systemDirsFromProbe reads the directories of ldconfig's "Can't stat DIR:
// …" complaints, in order, each once.
func systemDirsFromProbe(out string) []string {
	var dirs []string
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, "Can't stat ")
		if !ok {
			continue
		}
		d, _, ok := strings.Cut(rest, ": ")
		if !ok || !path.IsAbs(d) || path.Clean(d) != d || d == "/" || strings.ContainsAny(d, " \t") {
			continue
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
