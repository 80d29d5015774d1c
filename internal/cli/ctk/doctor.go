package ctk

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nctk/nctk/internal/doctor"
)

// doctorCommand is `nvidia-ctk doctor`.
func doctorCommand(e *env, args []string) error {
	var o doctor.Options
	var asJSON, verbose bool
	var engines string
	fs := newFlagSet("doctor")
	fs.String(&o.DriverRoot, []string{"driver-root"}, []string{"NVIDIA_CTK_DRIVER_ROOT"}, "DIR", "the driver's root (default: the host root)")
	fs.String(&o.DevRoot, []string{"dev-root"}, []string{"NVIDIA_CTK_DEV_ROOT"}, "DIR", "the root whose /dev holds the device nodes (default: the driver root)")
	fs.Func([]string{"spec-dir"}, "DIR", "a CDI spec directory (repeatable; default: config.toml's spec-dirs, /etc/cdi and /var/run/cdi)",
		func(s string) error { o.SpecDirs = append(o.SpecDirs, s); return nil })
	fs.String(&o.Bundle, []string{"bundle", "b"}, nil, "DIR", "an OCI bundle (config.json + rootfs) to judge as the runtime would start it")
	fs.String(&o.Image, []string{"image"}, nil, "NAME", "an image known to docker, podman or containerd, judged as --bundle judges a bundle (read with `docker image save`, `podman image save` or `ctr images export`; --engine picks the engine)")
	fs.String(&o.DockerHost, []string{"docker-host", "H"}, []string{"DOCKER_HOST"}, "HOST", "the docker daemon socket --image asks (unix:///run/docker.sock)")
	fs.String(&o.ContainerdNamespace, []string{"containerd-namespace"}, []string{"CONTAINERD_NAMESPACE"}, "NS", "the containerd namespace holding --image (default: k8s.io, default, moby)")
	fs.Func([]string{"gpu-arch"}, "CC", "check the container's GPU code against this compute capability, e.g. 9.0 (repeatable; default: the host GPUs')",
		func(s string) error { o.GPUArchs = append(o.GPUArchs, s); return nil })
	fs.String(&engines, []string{"engine"}, nil, "LIST", "limit the engine checks, and the engines --image asks, to these engines (docker,containerd,crio,podman)")
	fs.Bool(&asJSON, []string{"json"}, nil, "print the findings as JSON")
	fs.Bool(&verbose, []string{"verbose", "v"}, nil, "also list the checks that passed")
	fs.String(&o.HostRoot, []string{"host-root"}, nil, "DIR", "read every host path below DIR (for testing and for inspecting a mounted host)")
	err := parseLeaf(e, fs, args, "[flags]",
		"Check the chain a GPU container depends on (driver, device nodes, config.toml, CDI specs, engines,\n"+
			"optionally a container) and say what is broken, why it breaks containers and how to fix it.\n"+
			"Reads only; changes nothing. Exit status 1 when something would stop or break a GPU container.")
	if err != nil {
		return err
	}
	if o.Image != "" && o.Bundle != "" {
		return fmt.Errorf("%s: --image and --bundle: give one container", e.path)
	}
	if engines != "" {
		for _, s := range strings.Split(engines, ",") {
			if s = strings.TrimSpace(s); s != "" {
				o.Engines = append(o.Engines, s)
			}
		}
	}
	if e.config != "" {
		o.ConfigFile = e.config
	}
	o.Environ = e.Environ
	o.Rootless = rootlessUse(e)
	// Discovery's records (missing optional libraries, …) are noise next
	// to the findings; they are shown with --debug only.
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		o.Logger = e.log
	}
	rep, err := doctor.Run(o)
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if asJSON {
		data, err := rep.JSON()
		if err != nil {
			return err
		}
		if _, err := e.Stdout.Write(data); err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
	} else {
		fmt.Fprint(e.Stdout, rep.Text(verbose))
	}
	if n := rep.Count(doctor.Error); n > 0 {
		// The report is printed; this line on stderr and exit status 1
		// tell scripts the verdict.
		return fmt.Errorf("%s: %d problem(s) would stop or break GPU containers", e.path, n)
	}
	return nil
}

// rootlessUse reports whether the user running doctor uses rootless
// containers: not root, with a rootless docker socket or podman state in
// $XDG_RUNTIME_DIR.
func rootlessUse(e *env) bool {
	dir := e.Getenv("XDG_RUNTIME_DIR")
	if os.Geteuid() == 0 || dir == "" {
		return false
	}
	for _, p := range []string{"docker.sock", "podman", "containers"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
			return true
		}
	}
	return false
}
