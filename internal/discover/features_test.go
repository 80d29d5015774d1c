package discover

import (
	"os"
	"reflect"
	"testing"
)

// TestFeatures: each feature named in Options.Features gets the character
// devices matching its patterns under the dev root (sorted; not a char
// device: left out), and GDS its udev and cuFile files only when an
// nvidia-fs node exists; features not named are not looked for.
func TestFeatures(t *testing.T) {
	m := newMiniRoot(t)
	m.driver("535.261.03")
	m.writeCache()
	m.chardev("/dev/nvidiactl", 195, 255)
	m.chardev("/dev/nvidia-fs1", 240, 1)
	m.chardev("/dev/nvidia-fs0", 240, 0)
	m.chardev("/dev/infiniband/uverbs1", 231, 193)
	m.chardev("/dev/infiniband/uverbs0", 231, 192)
	m.chardev("/dev/infiniband/rdma_cm", 10, 58)
	m.chardev("/dev/infiniband/umad0", 231, 0) // not MOFED's
	m.chardev("/dev/gdrdrv", 238, 0)
	m.file("/dev/nvidia-nvswitch9", "not a device", 0o644)
	m.chardev("/dev/nvidia-nvswitchctl", 236, 255)
	m.chardev("/dev/nvidia-nvswitch0", 236, 0)
	m.mkdir("/run/udev/data")
	m.file("/etc/cufile.json", "{}", 0o644)
	if err := os.Chmod(m.path("/dev/gdrdrv"), 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(m.path("/dev/gdrdrv"), 0, 44); err != nil {
		t.Fatal(err)
	}

	d, err := m.discover(func(o *Options) { o.Features = Features() })
	if err != nil {
		t.Fatal(err)
	}
	want := map[Feature][]string{
		FeatureGDS:      {"/dev/nvidia-fs0", "/dev/nvidia-fs1"},
		FeatureMOFED:    {"/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"},
		FeatureGDRCopy:  {"/dev/gdrdrv"},
		FeatureNVSwitch: {"/dev/nvidia-nvswitch0", "/dev/nvidia-nvswitchctl"},
	}
	for f, paths := range want {
		fd := d.FeatureDevicesFor(f)
		var got []string
		for _, n := range fd.Nodes {
			got = append(got, n.Path)
			if n.HostPath != m.path(n.Path) || n.Major == 0 {
				t.Errorf("%s: node %+v", f, n)
			}
		}
		if !reflect.DeepEqual(got, paths) {
			t.Errorf("%s: nodes %q, want %q", f, got, paths)
		}
	}
	if n := d.FeatureDevicesFor(FeatureGDRCopy).Nodes[0]; n.Mode != 0o660 || n.GID != 44 || n.Minor != 0 || n.Major != 238 {
		t.Errorf("gdrdrv: %+v, want mode 0660 gid 44 238:0", n)
	}
	wantFiles := []File{{Name: "udev", Path: "/run/udev", HostPath: m.path("/run/udev"), Dir: true},
		{Name: "cufile.json", Path: "/etc/cufile.json", HostPath: m.path("/etc/cufile.json")}}
	if got := d.FeatureDevicesFor(FeatureGDS).Files; !reflect.DeepEqual(got, wantFiles) {
		t.Errorf("gds files %+v,\nwant %+v", got, wantFiles)
	}
	if f := d.FeatureDevicesFor(FeatureMOFED).Files; f != nil {
		t.Errorf("mofed files %+v", f)
	}

	// Not named: not looked for.
	d, err = m.discover(func(o *Options) { o.Features = []Feature{FeatureGDRCopy} })
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Features) != 1 || len(d.FeatureDevicesFor(FeatureGDS).Nodes) != 0 || len(d.FeatureDevicesFor(FeatureGDRCopy).Nodes) != 1 {
		t.Errorf("only gdrcopy asked: %+v", d.Features)
	}

	// GDS files need an nvidia-fs node.
	for _, n := range []string{"/dev/nvidia-fs0", "/dev/nvidia-fs1"} {
		if err := os.Remove(m.path(n)); err != nil {
			t.Fatal(err)
		}
	}
	d, err = m.discover(func(o *Options) { o.Features = []Feature{FeatureGDS} })
	if err != nil {
		t.Fatal(err)
	}
	if fd := d.FeatureDevicesFor(FeatureGDS); fd.Nodes != nil || fd.Files != nil {
		t.Errorf("gds without nvidia-fs nodes: %+v", fd)
	}
}

func TestFeatureEnvVar(t *testing.T) {
	want := []string{"NVIDIA_GDS", "NVIDIA_MOFED", "NVIDIA_GDRCOPY", "NVIDIA_NVSWITCH"}
	var got []string
	for _, f := range Features() {
		got = append(got, f.EnvVar())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("EnvVar = %q, want %q", got, want)
	}
}
