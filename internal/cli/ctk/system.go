package ctk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nctk/nctk/internal/devnodes"
	"github.com/nctk/nctk/internal/discover"
)

// kernelModules are what --load-kernel-modules loads, in order.
func kernelModules() []string { return []string{"nvidia", "nvidia-uvm", "nvidia-modeset"} }

const modprobeTimeout = time.Minute

// nodeFlags are the flags shared by the system commands.
type nodeFlags struct {
	driverRoot, devRoot, procRoot string
	loadModules                   bool
	dryRun                        bool
}

// register defines the shared flags. --driver-root is NVIDIA's: the root
// modprobe runs in (chrooted into it unless it is /); create-device-nodes
// (rootAlias) also calls it --root and reads $ROOT too; there it is also
// the dev root when --dev-root is not given (NVIDIA's meaning for that
// command).
func (n *nodeFlags) register(fs *flagSet, rootAlias bool) {
	n.driverRoot, n.devRoot, n.procRoot = "/", "/", "/"
	names, envs := []string{"driver-root"}, []string{"NVIDIA_DRIVER_ROOT", "DRIVER_ROOT"}
	if rootAlias {
		names, envs = []string{"root", "driver-root"}, []string{"ROOT", "NVIDIA_DRIVER_ROOT", "DRIVER_ROOT"}
	}
	fs.String(&n.driverRoot, names, envs, "DIR", "the driver's root: kernel modules are loaded from it (modprobe chrooted into it)")
	fs.String(&n.devRoot, []string{"dev-root"}, []string{"NVIDIA_DEV_ROOT", "DEV_ROOT"}, "DIR", "the root whose /dev gets the nodes")
	fs.String(&n.procRoot, []string{"proc-root"}, nil, "DIR", "the root whose /proc describes the driver (for testing)")
	fs.Bool(&n.loadModules, []string{"load-kernel-modules"}, []string{"LOAD_KERNEL_MODULES"}, "modprobe nvidia, nvidia-uvm and nvidia-modeset first")
	fs.Bool(&n.dryRun, []string{"dry-run"}, []string{"DRY_RUN"}, "report what would be done, change nothing")
}

func createDeviceNodes(e *env, args []string) error {
	var nf nodeFlags
	var set devnodes.Set
	fs := newFlagSet("create-device-nodes")
	nf.register(fs, true)
	fs.Bool(&set.Control, []string{"control-devices"}, nil, "create nvidiactl, nvidia-modeset, nvidia-uvm and nvidia-uvm-tools")
	fs.Bool(&set.GPUs, []string{"gpu-devices"}, nil, "create /dev/nvidiaN for every GPU")
	fs.Bool(&set.Caps, []string{"mig-caps"}, nil, "create the MIG config/monitor nodes in /dev/nvidia-caps")
	err := parseLeaf(e, fs, args, "[flags]",
		"Create the NVIDIA device nodes the loaded driver implies and the host lacks. Without a selection\n"+
			"(--control-devices, --gpu-devices, --mig-caps) every kind is created.")
	if err != nil {
		return err
	}
	if set == (devnodes.Set{}) {
		set = devnodes.All()
	}
	if !fs.IsSet("dev-root") {
		nf.devRoot = nf.driverRoot
	}
	if nf.loadModules {
		loadKernelModules(e, nf.dryRun, nf.driverRoot)
	}
	nodes, err := devnodes.Expected(nf.procRoot, set)
	if err != nil {
		return err
	}
	return makeNodes(e, nf, nodes)
}

func makeNodes(e *env, nf nodeFlags, nodes []discover.DeviceNode) error {
	results, err := devnodes.CreateNodes(nf.devRoot, nodes, nf.dryRun)
	for _, r := range results {
		line := fmt.Sprintf("%s: %s (%s, mode %04o)", r.Status, r.Path, r.Node.ID(), r.Node.Mode)
		if r.Detail != "" {
			line += ": " + r.Detail
		}
		e.report(line)
	}
	return err
}

func createDevCharSymlinks(e *env, args []string) error {
	var nf nodeFlags
	var charDir string
	var createAll, createNodes bool
	fs := newFlagSet("create-dev-char-symlinks")
	nf.register(fs, false)
	fs.String(&charDir, []string{"dev-char-path"}, []string{"DEV_CHAR_PATH"}, "DIR", "the directory of the links (default: /dev/char under --dev-root)")
	fs.Bool(&createAll, []string{"create-all"}, []string{"CREATE_ALL"}, "link every node the driver implies, also those not created yet")
	fs.Bool(&createNodes, []string{"create-device-nodes"}, []string{"CREATE_DEVICE_NODES"}, "create the missing device nodes first")
	err := parseLeaf(e, fs, args, "[flags]",
		"Create /dev/char/MAJOR:MINOR symlinks to the NVIDIA device nodes, so that systemd can resolve the\n"+
			"device numbers of GPU containers' cgroup rules (the `systemctl daemon-reload` problem).")
	if err != nil {
		return err
	}
	if charDir == "" {
		charDir = filepath.Join(nf.devRoot, "dev", "char")
	}
	if nf.loadModules {
		loadKernelModules(e, nf.dryRun, nf.driverRoot)
	}
	var expected []discover.DeviceNode
	if createAll || createNodes {
		if expected, err = devnodes.Expected(nf.procRoot, devnodes.All()); err != nil {
			return err
		}
	}
	if createNodes {
		if err := makeNodes(e, nf, expected); err != nil {
			return err
		}
	}
	nodes, err := devnodes.Scan(nf.devRoot)
	if err != nil {
		return err
	}
	if createAll {
		nodes = mergeNodes(nodes, expected)
	}
	results, err := devnodes.CreateCharSymlinks(nf.devRoot, charDir, nodes, nf.dryRun)
	for _, r := range results {
		line := fmt.Sprintf("%s: %s -> %s", r.Status, r.Link, r.Target)
		if r.Detail != "" {
			line += ": " + r.Detail
		}
		e.report(line)
	}
	return err
}

// mergeNodes adds the nodes of extra whose device numbers a lacks.
func mergeNodes(a, extra []discover.DeviceNode) []discover.DeviceNode {
	seen := map[string]bool{}
	for _, n := range a {
		seen[n.ID()] = true
	}
	for _, n := range extra {
		if !seen[n.ID()] {
			seen[n.ID()] = true
			a = append(a, n)
		}
	}
	return a
}

// loadKernelModules runs modprobe for each module; failures are reported
// as warnings (the node creation that follows says what is missing). With
// a driver root other than /, modprobe is the root's own, run chrooted
// into it (a driver container's root holds the modules).
func loadKernelModules(e *env, dryRun bool, driverRoot string) {
	dirs := e.Getenv("PATH") + ":/usr/local/sbin:/usr/sbin:/sbin"
	chroot := driverRoot != "" && filepath.Clean(driverRoot) != "/"
	if chroot {
		driverRoot = filepath.Clean(driverRoot)
		var rooted []string
		for _, d := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
			rooted = append(rooted, filepath.Join(driverRoot, d))
		}
		dirs = strings.Join(rooted, ":")
	}
	modprobe, err := lookPath("modprobe", dirs)
	if err != nil {
		e.log.Warn("cannot load kernel modules: modprobe not found", "error", err)
		return
	}
	shown := modprobe
	if chroot {
		modprobe = "/" + strings.TrimPrefix(strings.TrimPrefix(modprobe, driverRoot), "/")
		shown = "chroot " + driverRoot + " " + modprobe
	}
	for _, m := range kernelModules() {
		if dryRun {
			e.report(fmt.Sprintf("would run: %s %s", shown, m))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), modprobeTimeout)
		cmd := exec.CommandContext(ctx, modprobe, m)
		if chroot {
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: driverRoot}
			cmd.Dir = "/"
		}
		// An explicit minimal environment: nothing of the caller's steers
		// modprobe (MODPROBE_OPTIONS, LD_PRELOAD, …).
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			var ee *exec.ExitError
			msg := err.Error()
			if errors.As(err, &ee) {
				msg = fmt.Sprintf("exit status %d", ee.ExitCode())
			}
			e.log.Warn("loading kernel module failed", "module", m, "error", msg, "output", strings.TrimSpace(out.String()))
			continue
		}
		e.log.Debug("loaded kernel module", "module", m)
	}
}

// report prints a result line on stdout unless --quiet.
func (e *env) report(line string) {
	if !e.quiet {
		fmt.Fprintln(e.Stdout, line)
	}
}
