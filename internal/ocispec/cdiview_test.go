package ocispec

import (
	"os"
	"reflect"
	"testing"

	"github.com/nctk/nctk/internal/cdiedit"
	"github.com/nctk/nctk/internal/plan"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// cdiViewConfigs are config.json files for TestApplyCDIViewFromParse:
// unknown fields inside entries the CDI edits replace or keep, a user
// namespace (idmapped bind mounts), groups, devices and hooks already there.
var cdiViewConfigs = map[string]string{
	"bare": `{"ociVersion":"1.2.0","root":{"path":"rootfs"}}`,
	"full": `{"ociVersion":"1.2.0","x-top":{"a":[1,2.50,"x"]},
 "process":{"args":["sh"],"env":["PATH=/bin","A=old"],"cwd":"/","user":{"uid":1000,"gid":1000,"additionalGids":[5,44],"x-u":1}},
 "root":{"path":"rootfs"},
 "mounts":[{"destination":"/proc","type":"proc","source":"proc","x-m":true},
  {"destination":"/etc/acme","type":"bind","source":"/old","options":["rbind"],"x-keep":1},
  {"destination":"/keep","type":"bind","source":"/keep","options":["rbind","ro"],"x-keep":2}],
 "hooks":{"createContainer":[{"path":"/bin/other","args":["other"],"x-h":1}],"x-future-stage":[{"path":"/x"}]},
 "linux":{"devices":[{"path":"/dev/acme0","type":"c","major":240,"minor":0,"x-d":1},{"path":"/dev/fuse","type":"c","major":10,"minor":229}],
  "resources":{"devices":[{"allow":false,"access":"rwm"},{"allow":true,"type":"c","major":10,"minor":229,"access":"rwm","x-r":1}],"x-res":{"y":1}},
  "netDevices":{"eth9":{"name":"eth9x"}},
  "namespaces":[{"type":"pid"},{"type":"mount"}],
  "x-linux":[]}}`,
	"userns": `{"ociVersion":"1.2.0","process":{"env":["PATH=/bin"],"user":{"uid":0,"gid":0}},"root":{"path":"rootfs"},
 "mounts":[{"destination":"/etc/acme","type":"bind","source":"/old"}],
 "linux":{"namespaces":[{"type":"user"},{"type":"mount"}],"uidMappings":[{"containerID":0,"hostID":100000,"size":65536}],
  "gidMappings":[{"containerID":0,"hostID":100000,"size":65536}]}}`,
}

func cdiViewEdits() []*cdispecs.ContainerEdits {
	mode := os.FileMode(0o640)
	uid, gid := uint32(7), uint32(8)
	timeout := 3
	return []*cdispecs.ContainerEdits{
		{Env: []string{"A=new", "B=1"}},
		{
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
			DeviceNodes: []*cdispecs.DeviceNode{{Path: "/dev/acme0", Type: "c", Major: 240, Minor: 0, FileMode: nil}, {Path: "/dev/acme1", Type: "c", Major: 240, Minor: 1, FileMode: &mode, UID: &uid, GID: &gid, Permissions: "rw"}},
			Mounts: []*cdispecs.Mount{{HostPath: "/etc/hosts", ContainerPath: "/etc/acme", Options: []string{"ro", "nosuid", "nodev", "bind"}},
				{HostPath: "/usr/lib/libacme.so.1", ContainerPath: "/usr/lib/libacme.so.1", Options: []string{"ro", "bind"}},
				{HostPath: "tmpfs", ContainerPath: "/tmp/acme", Type: "tmpfs", Options: []string{"size=1m"}}},
			Hooks: []*cdispecs.Hook{{HookName: "createContainer", Path: "/usr/bin/acme-hook", Args: []string{"acme-hook", "x"}, Env: []string{"E=1"}, Timeout: &timeout},
				{HookName: "startContainer", Path: "/usr/bin/acme-start"}},
			AdditionalGIDs: []uint32{44, 45},
		},
		{IntelRdt: &cdispecs.IntelRdt{ClosID: "acme"}, NetDevices: []*cdispecs.LinuxNetDevice{{HostInterfaceName: "eth0", Name: "eth0c"}}},
	}
}

// TestApplyCDIViewFromParse: the CDI edits applied on the typed view Parse
// decoded (no second decode of config.json) give, byte for byte, what they
// give on the view decoded from the tree at that point; with plan entries
// besides the CDI edits (which change the tree first) too; and Spec after
// Apply is what decoding the written file gives.
func TestApplyCDIViewFromParse(t *testing.T) {
	for name, cfg := range cdiViewConfigs {
		for i, e := range cdiViewEdits() {
			for _, withPlan := range []bool{false, true} {
				p := &plan.Plan{CDI: e}
				if withPlan {
					p = testPlan()
					p.CDI = e
				}
				fast, err := Parse(name, []byte(cfg))
				if err != nil {
					t.Fatal(err)
				}
				if fast.cdi == nil {
					t.Fatalf("%s: Parse decoded no CDI view", name)
				}
				slow, _ := Parse(name, []byte(cfg))
				slow.cdi = nil
				hc := HookConfig{Path: hookPath}
				ferr, serr := Apply(fast, p, hc), Apply(slow, p, hc)
				if (ferr == nil) != (serr == nil) {
					t.Fatalf("%s/%d/plan=%v: errors %v and %v", name, i, withPlan, ferr, serr)
				}
				if ferr != nil {
					continue
				}
				fb, _ := fast.Bytes()
				sb, _ := slow.Bytes()
				if string(fb) != string(sb) {
					t.Errorf("%s/%d/plan=%v: from the parsed view\n%s\nfrom the tree\n%s", name, i, withPlan, fb, sb)
				}
				want, err := decodeSpec(fb)
				if err != nil {
					t.Fatal(err)
				}
				if got := fast.Spec(); !reflect.DeepEqual(got, want) {
					t.Errorf("%s/%d/plan=%v: Spec after Apply %+v, want %+v", name, i, withPlan, got, want)
				}
			}
		}
	}
}

// TestApplyCDIKeepsParsedView: applying CDI edits leaves the view Parse
// decoded as it was (a failed Apply leaves the document unchanged, and the
// next Apply starts from it).
func TestApplyCDIKeepsParsedView(t *testing.T) {
	doc, err := Parse("full", []byte(cdiViewConfigs["full"]))
	if err != nil {
		t.Fatal(err)
	}
	before := cloneForEdit(doc.cdi)
	spec := *doc.Spec()
	for _, e := range cdiViewEdits() {
		if err := applyCDI(deepCopy(doc.tree).(object), e, doc.cdi, cdiedit.Apply); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(doc.cdi, before) {
		t.Errorf("CDI view changed by the edits:\n%+v\nwas %+v", doc.cdi, before)
	}
	if !reflect.DeepEqual(*doc.Spec(), spec) {
		t.Error("Spec changed by the edits")
	}
}
