package nvc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nctk/nctk/internal/devnodes"
	"github.com/nctk/nctk/internal/hostfile"
)

// LoadKmods does what --load-kmods asks: load the nvidia, nvidia_uvm and
// nvidia_modeset kernel modules (modprobe run inside the driver root) and
// create the device nodes the loaded driver implies under the root's /dev
// (control nodes, one per GPU, MIG config/monitor capabilities). As in
// NVIDIA's CLI, nothing here is fatal: failures are logged, and discovery
// reports what is still missing. It does nothing inside a user namespace,
// where neither is permitted.
func LoadKmods(g *Globals, log *slog.Logger) {
	if inUserNamespace() {
		log.Info("skipping kernel modules and device nodes: running in a user namespace")
		return
	}
	for _, m := range []string{"nvidia", "nvidia_uvm", "nvidia_modeset"} {
		if err := modprobe(g.Root, m); err != nil {
			log.Warn("could not load kernel module", "module", m, "err", err)
		}
	}
	nodes, err := devnodes.Expected(g.Root, devnodes.All())
	if err != nil {
		log.Warn("could not work out the device nodes to create", "err", err)
		return
	}
	results, err := devnodes.CreateNodes(g.Root, nodes, false)
	for _, r := range results {
		log.Info("device node", "result", r)
	}
	if err != nil {
		log.Warn("could not create every device node", "err", err)
	}
}

// modprobe loads a module with the root's modprobe, chrooted into the root
// when it is not "/", so that the root's modules and configuration are used.
func modprobe(root, module string) error {
	if loaded(module) {
		return nil
	}
	bin := ""
	for _, p := range []string{"/sbin/modprobe", "/usr/sbin/modprobe", "/bin/modprobe", "/usr/bin/modprobe"} {
		if fi, err := os.Stat(filepath.Join(root, p)); err == nil && fi.Mode().IsRegular() {
			bin = p
			break
		}
	}
	if bin == "" {
		return &os.PathError{Op: "find", Path: filepath.Join(root, "sbin/modprobe"), Err: os.ErrNotExist}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, module)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if root != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, module, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// loaded reports whether /sys/module/<module> exists.
func loaded(module string) bool {
	_, err := os.Stat("/sys/module/" + module)
	return err == nil
}

// inUserNamespace reports whether this process runs in a user namespace
// other than the initial one (uid_map is not the identity map of all ids).
func inUserNamespace() bool {
	b, err := hostfile.ReadFile("/proc/self/uid_map", hostfile.MaxProc)
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295")
}
