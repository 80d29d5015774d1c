package discover

import (
	"errors"
	"fmt"
	"path"

	"github.com/nctk/nctk/internal/devnum"
)

// CheckDevices reports, as *DeviceNodeError values joined together, the
// device nodes a container with the given GPUs needs but the host lacks:
// /dev/nvidiactl (every container gets it) and each GPU's
// /dev/nvidia<minor>. Missing nodes are not an error for discovery itself
// (info works without them); plan.Build checks them here, so that every
// command that builds a plan fails the same way.
func (d *Driver) CheckDevices(gpus []GPU) error {
	var errs []error
	if !d.hasControl("nvidiactl") {
		errs = append(errs, &DeviceNodeError{Path: "/dev/nvidiactl", HostPath: d.devHostPath("/dev/nvidiactl"),
			Major: devnum.MajorNVIDIA, Minor: devnum.MinorCtl, Missing: true})
	}
	for _, g := range gpus {
		if g.Node.Path == "" {
			p := fmt.Sprintf("/dev/nvidia%d", g.Minor)
			errs = append(errs, &DeviceNodeError{Path: p, HostPath: d.devHostPath(p), Major: devnum.MajorNVIDIA,
				Minor: uint32(g.Minor), Missing: true})
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) hasControl(name string) bool {
	for _, n := range d.ControlNodes {
		if path.Base(n.Path) == name {
			return true
		}
	}
	return false
}

// devHostPath guesses the host path of a node from the nodes found (their
// dev root), else from the driver root.
func (d *Driver) devHostPath(p string) string {
	for _, n := range d.ControlNodes {
		if len(n.HostPath) >= len(n.Path) {
			return n.HostPath[:len(n.HostPath)-len(n.Path)] + p
		}
	}
	return join(d.Root, p)
}
