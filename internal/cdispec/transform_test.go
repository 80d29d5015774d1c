package cdispec

import (
	"reflect"
	"testing"

	cdi "tags.cncf.io/container-device-interface/specs-go"
)

func transformInput() *cdi.Spec {
	return &cdi.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu",
		ContainerEdits: cdi.ContainerEdits{
			DeviceNodes: []*cdi.DeviceNode{{Path: "/run/nvidia/driver/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm", HostPath: "/run/nvidia/driver/dev/nvidia-uvm"}},
			Mounts: []*cdi.Mount{
				{HostPath: "/run/nvidia/driver/usr/lib/libcuda.so.1", ContainerPath: "/run/nvidia/driver/usr/lib/libcuda.so.1"},
				{HostPath: "/run/nvidia/driver2/x", ContainerPath: "/x"},
			},
			Hooks: []*cdi.Hook{
				{HookName: "createContainer", Path: "/run/nvidia/driver/usr/bin/nvidia-cdi-hook",
					Args: []string{"nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/run/nvidia/driver/usr/lib/libcuda.so"}},
				{HookName: "startContainer", Path: "/run/nvidia/driver/bin/x", Args: []string{"/run/nvidia/driver/a"}},
				{HookName: "prestart", Path: "/run/nvidia/driver/bin/y", Args: []string{"/run/nvidia/driver/b", "/run/nvidia/driver/c::/run/nvidia/driver/d"}},
			},
		},
		Devices: []cdi.Device{{Name: "0", ContainerEdits: cdi.ContainerEdits{DeviceNodes: []*cdi.DeviceNode{{Path: "/run/nvidia/driver/dev/nvidia0"}}}}},
	}
}

func TestTransformRoot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to string
		rel      RelativeTo
		want     func(s *cdi.Spec)
	}{
		{name: "host", from: "/run/nvidia/driver", to: "/", rel: RelativeToHost, want: func(s *cdi.Spec) {
			e := &s.ContainerEdits
			e.DeviceNodes[0].HostPath = "/dev/nvidiactl"
			e.DeviceNodes[1].HostPath = "/dev/nvidia-uvm"
			e.Mounts[0].HostPath = "/usr/lib/libcuda.so.1"
			e.Hooks[0].Path = "/usr/bin/nvidia-cdi-hook"
			e.Hooks[2].Path = "/bin/y"
			e.Hooks[2].Args = []string{"/b", "/c::/d"}
			s.Devices[0].ContainerEdits.DeviceNodes[0].HostPath = "/dev/nvidia0"
		}},
		{name: "container", from: "/run/nvidia/driver/", to: "/host", rel: RelativeToContainer, want: func(s *cdi.Spec) {
			e := &s.ContainerEdits
			e.DeviceNodes[0].Path = "/host/dev/nvidiactl"
			e.Mounts[0].ContainerPath = "/host/usr/lib/libcuda.so.1"
			e.Hooks[0].Args[3] = "libcuda.so.1::/host/usr/lib/libcuda.so"
			e.Hooks[1].Path = "/host/bin/x"
			e.Hooks[1].Args = []string{"/host/a"}
			s.Devices[0].ContainerEdits.DeviceNodes[0].Path = "/host/dev/nvidia0"
		}},
		{name: "same root", from: "/run/nvidia/driver", to: "/run/nvidia/driver", rel: RelativeToHost, want: func(*cdi.Spec) {}},
		{name: "empty to is /", from: "/run/nvidia/driver", rel: RelativeToHost, want: func(s *cdi.Spec) {
			e := &s.ContainerEdits
			e.DeviceNodes[0].HostPath = "/dev/nvidiactl"
			e.DeviceNodes[1].HostPath = "/dev/nvidia-uvm"
			e.Mounts[0].HostPath = "/usr/lib/libcuda.so.1"
			e.Hooks[0].Path = "/usr/bin/nvidia-cdi-hook"
			e.Hooks[2].Path = "/bin/y"
			e.Hooks[2].Args = []string{"/b", "/c::/d"}
			s.Devices[0].ContainerEdits.DeviceNodes[0].HostPath = "/dev/nvidia0"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, want := transformInput(), transformInput()
			tc.want(want)
			if err := TransformRoot(got, tc.from, tc.to, tc.rel); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got.ContainerEdits, want.ContainerEdits)
			}
		})
	}
	if err := TransformRoot(transformInput(), "/a", "/b", "guest"); err == nil {
		t.Error("relative-to guest accepted")
	}
}
