package discover

import (
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Feature is an optional device family beside the GPUs that a container
// asks for by name (NVIDIA_GDS=enabled, …): NVIDIA's feature-gated devices.
// Discovery finds a feature's nodes and files only when Options.Features
// names it.
type Feature string

// The features NVIDIA's runtime knows.
const (
	// FeatureGDS is GPUDirect Storage: the nvidia-fs nodes, and, when one
	// exists, the udev database and cuFile's configuration.
	FeatureGDS Feature = "gds"
	// FeatureMOFED is the InfiniBand verbs and RDMA connection manager
	// nodes of Mellanox OFED.
	FeatureMOFED Feature = "mofed"
	// FeatureGDRCopy is the gdrcopy driver's node.
	FeatureGDRCopy Feature = "gdrcopy"
	// FeatureNVSwitch is the NVSwitch control node and the switches' nodes.
	FeatureNVSwitch Feature = "nvswitch"
)

// featureSpec says what a feature brings: device nodes matched by glob
// patterns under the dev root, and, only when some node exists, files and
// directories of the driver root mounted at the same path.
type featureSpec struct {
	feature Feature
	nodes   []string
	files   []string
	dirs    []string
}

// featureSpecs is the one registration of each feature, in NVIDIA's order.
var featureSpecs = []featureSpec{
	{feature: FeatureGDS, nodes: []string{"/dev/nvidia-fs*"}, dirs: []string{"/run/udev"}, files: []string{"/etc/cufile.json"}},
	{feature: FeatureMOFED, nodes: []string{"/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm"}},
	{feature: FeatureGDRCopy, nodes: []string{"/dev/gdrdrv"}},
	{feature: FeatureNVSwitch, nodes: []string{"/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch*"}},
}

// Features returns every known feature, in NVIDIA's order.
func Features() []Feature {
	out := make([]Feature, len(featureSpecs))
	for i, s := range featureSpecs {
		out[i] = s.feature
	}
	return out
}

// EnvVar is the container variable that asks for f with the value
// "enabled" (NVIDIA_GDS for gds).
func (f Feature) EnvVar() string { return "NVIDIA_" + strings.ToUpper(string(f)) }

// FeatureDevices is what discovery found for one feature.
type FeatureDevices struct {
	Feature Feature
	// Nodes are the feature's character devices, sorted by path.
	Nodes []DeviceNode
	// Files are the feature's files and directories (File.Dir), present
	// only when Nodes is not empty.
	Files []File
}

// features finds the nodes and files of the features Options.Features
// names. A path matching a node pattern that is not a character device is
// left out with a warning.
func (x *discoverer) features() error {
	for _, s := range featureSpecs {
		if !slices.Contains(x.opts.Features, s.feature) {
			continue
		}
		fd := FeatureDevices{Feature: s.feature}
		for _, pat := range s.nodes {
			matches, err := filepath.Glob(x.dev.at(pat))
			if err != nil {
				return fmt.Errorf("%s device nodes %s: %w", s.feature, pat, err)
			}
			for _, host := range matches {
				p := path.Join(path.Dir(pat), filepath.Base(host))
				if slices.ContainsFunc(fd.Nodes, func(n DeviceNode) bool { return n.Path == p }) {
					continue
				}
				node, ok, err := x.node(p, -1, -1)
				if err != nil {
					x.warn("ignoring %v", err)
					continue
				}
				if ok {
					fd.Nodes = append(fd.Nodes, node)
				}
			}
		}
		slices.SortFunc(fd.Nodes, func(a, b DeviceNode) int { return strings.Compare(a.Path, b.Path) })
		if len(fd.Nodes) > 0 {
			for _, p := range s.dirs {
				x.featureFile(&fd, p, true)
			}
			for _, p := range s.files {
				x.featureFile(&fd, p, false)
			}
		}
		x.d.Features = append(x.d.Features, fd)
	}
	return nil
}

// featureFile adds p (a directory when dir) of the driver root to fd's
// files when it exists as that kind of file.
func (x *discoverer) featureFile(fd *FeatureDevices, p string, dir bool) {
	real, mode, err := x.root.statFollow(p)
	if err != nil || mode.IsDir() != dir || (!dir && !mode.IsRegular()) {
		return
	}
	fd.Files = append(fd.Files, File{Name: path.Base(p), Path: p, HostPath: x.root.host(real), Dir: dir})
}

// FeatureDevicesFor returns what discovery found for f (zero when
// Options.Features did not name it or nothing was found).
func (d *Driver) FeatureDevicesFor(f Feature) FeatureDevices {
	for _, fd := range d.Features {
		if fd.Feature == f {
			return fd
		}
	}
	return FeatureDevices{Feature: f}
}
