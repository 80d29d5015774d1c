package planner

import (
	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// ImageTarget detects the library layout of the container image whose
// root is at rootfsPath (rootfs.Root.Target, every lookup resolved inside
// the root) and returns it as the plan builder takes it.
func ImageTarget(rootfsPath string) (plan.Target, error) {
	root, err := rootfs.Open(rootfsPath)
	if err != nil {
		return plan.Target{}, err
	}
	defer root.Close()
	t := root.Target()
	return plan.Target{LibDir: t.LibDir, Lib32Dir: t.Lib32Dir, BinDir: t.BinDir}, nil
}
