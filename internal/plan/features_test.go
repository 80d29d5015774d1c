package plan

import (
	"reflect"
	"testing"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/cdiedit"
	"github.com/nctk/nctk/internal/discover"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

func featureNode(p string, maj, min, mode, gid uint32) discover.DeviceNode {
	return discover.DeviceNode{Path: p, HostPath: "/drv" + p, Major: maj, Minor: min, Mode: mode, GID: gid}
}

// featureDriver is testDriver with every feature discovered.
func featureDriver() *discover.Driver {
	d := testDriver()
	d.Features = []discover.FeatureDevices{
		{Feature: discover.FeatureGDS, Nodes: []discover.DeviceNode{featureNode("/dev/nvidia-fs0", 240, 0, 0o666, 0), featureNode("/dev/nvidia-fs1", 240, 1, 0o666, 0)},
			Files: []discover.File{{Name: "udev", Path: "/run/udev", HostPath: "/drv/run/udev", Dir: true}, {Name: "cufile.json", Path: "/etc/cufile.json", HostPath: "/drv/etc/cufile.json"}}},
		{Feature: discover.FeatureMOFED, Nodes: []discover.DeviceNode{featureNode("/dev/infiniband/rdma_cm", 10, 58, 0o666, 0), featureNode("/dev/infiniband/uverbs0", 231, 192, 0o660, 44)}},
		{Feature: discover.FeatureGDRCopy, Nodes: []discover.DeviceNode{featureNode("/dev/gdrdrv", 238, 0, 0o660, 45)}},
		{Feature: discover.FeatureNVSwitch, Nodes: []discover.DeviceNode{featureNode("/dev/nvidia-nvswitchctl", 236, 255, 0o666, 0), featureNode("/dev/nvidia-nvswitch0", 236, 0, 0o666, 0)}},
	}
	return d
}

// TestBuildFeatures: each asked feature adds its nodes (class
// DeviceFeature, Grant naming the feature) after the GPUs, and its files
// as read-only mounts; features not asked add nothing.
func TestBuildFeatures(t *testing.T) {
	tests := []struct {
		name     string
		features []discover.Feature
		nodes    []string
		mounts   []string
	}{
		{"none", nil, nil, nil},
		{"gds", []discover.Feature{discover.FeatureGDS}, []string{"/dev/nvidia-fs0", "/dev/nvidia-fs1"}, []string{"/run/udev", "/etc/cufile.json"}},
		{"mofed", []discover.Feature{discover.FeatureMOFED}, []string{"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0"}, nil},
		{"gdrcopy", []discover.Feature{discover.FeatureGDRCopy}, []string{"/dev/gdrdrv"}, nil},
		{"nvswitch", []discover.Feature{discover.FeatureNVSwitch}, []string{"/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch0"}, nil},
		{"gdrcopy and gds", []discover.Feature{discover.FeatureGDS, discover.FeatureGDRCopy}, []string{"/dev/nvidia-fs0", "/dev/nvidia-fs1", "/dev/gdrdrv"}, []string{"/run/udev", "/etc/cufile.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := featureDriver()
			p, err := Build(d, Options{Caps: caps.Default(), GPUs: d.GPUs[:1], Features: tt.features})
			if err != nil {
				t.Fatal(err)
			}
			var nodes, mounts []string
			for i, dev := range p.Devices {
				if dev.Class != DeviceFeature {
					if nodes != nil {
						t.Errorf("device %d %s after the feature nodes", i, dev.Path)
					}
					continue
				}
				nodes = append(nodes, dev.Path)
				if dev.Grant == "" || dev.HostPath != "/drv"+dev.Path || dev.Major == 0 {
					t.Errorf("feature node %+v", dev)
				}
			}
			for _, m := range p.Mounts {
				if m.Class != MountFeature {
					continue
				}
				mounts = append(mounts, m.Destination)
				if m.Source != "/drv"+m.Destination || !reflect.DeepEqual(m.Options, []string{OptRO, OptNoSuid, OptNoDev, OptRBind, OptRPrivate}) ||
					(m.Kind == KindDir) != (m.Destination == "/run/udev") {
					t.Errorf("feature mount %+v", m)
				}
			}
			if !reflect.DeepEqual(nodes, tt.nodes) || !reflect.DeepEqual(mounts, tt.mounts) {
				t.Errorf("nodes %q mounts %q, want %q %q", nodes, mounts, tt.nodes, tt.mounts)
			}
		})
	}
}

// TestAdditionalGIDs: NVIDIA's rule: the group of each node that is not
// both world-readable and world-writable, unless it is root's group; once
// each; none with the opt-out.
func TestAdditionalGIDs(t *testing.T) {
	dev := func(mode, gid uint32) Device { return Device{FileMode: mode, GID: gid} }
	tests := []struct {
		name string
		devs []Device
		want []uint32
	}{
		{"world rw", []Device{dev(0o666, 44)}, nil},
		{"world rw and more", []Device{dev(0o777, 44)}, nil},
		{"group only", []Device{dev(0o660, 44)}, []uint32{44}},
		{"world readable only", []Device{dev(0o664, 44)}, []uint32{44}},
		{"world writable only", []Device{dev(0o662, 44)}, []uint32{44}},
		{"root group", []Device{dev(0o660, 0)}, nil},
		{"owner only", []Device{dev(0o600, 45)}, []uint32{45}},
		{"once each, device order", []Device{dev(0o660, 45), dev(0o660, 44), dev(0o600, 45), dev(0o666, 46)}, []uint32{45, 44}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := additionalGIDs(tt.devs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("additionalGIDs = %v, want %v", got, tt.want)
			}
		})
	}

	d := featureDriver()
	all := []discover.Feature{discover.FeatureMOFED, discover.FeatureGDRCopy}
	p, err := Build(d, Options{Caps: caps.Default(), GPUs: d.GPUs[:1], Features: all})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{44, 45}; !reflect.DeepEqual(p.AdditionalGIDs, want) {
		t.Errorf("Build: AdditionalGIDs = %v, want %v", p.AdditionalGIDs, want)
	}
	if p, err = Build(d, Options{Caps: caps.Default(), GPUs: d.GPUs[:1], Features: all, NoAdditionalGIDs: true}); err != nil {
		t.Fatal(err)
	}
	if p.AdditionalGIDs != nil {
		t.Errorf("Build with NoAdditionalGIDs: AdditionalGIDs = %v", p.AdditionalGIDs)
	}
	if m := Merge(&Plan{AdditionalGIDs: []uint32{44, 7}}, &Plan{AdditionalGIDs: []uint32{7, 45}}, cdiedit.Merge); !reflect.DeepEqual(m.AdditionalGIDs, []uint32{44, 7, 45}) {
		t.Errorf("Merge: AdditionalGIDs = %v", m.AdditionalGIDs)
	}
	a, b := &Plan{CDI: &cdispecs.ContainerEdits{Env: []string{"A=1"}}}, &Plan{CDI: &cdispecs.ContainerEdits{Env: []string{"B=2"}}}
	if m := Merge(a, b, cdiedit.Merge); m.CDI == nil || !reflect.DeepEqual(m.CDI.Env, []string{"A=1", "B=2"}) || len(a.CDI.Env) != 1 {
		t.Errorf("Merge: CDI = %+v (a's %+v), want env A=1, B=2", m.CDI, a.CDI)
	}
}
