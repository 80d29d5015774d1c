package cdiedit

import (
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

func TestApply(t *testing.T) {
	for _, tt := range []struct {
		name    string
		s       *specs.Spec
		e       *cdispecs.ContainerEdits
		want    *specs.Spec
		wantErr string
	}{
		{
			name: "env replaced by key, mount and hook added, device node filled in",
			s:    &specs.Spec{Process: &specs.Process{Env: []string{"A=1", "B=2"}}},
			e: &cdispecs.ContainerEdits{
				Env:         []string{"B=3", "C=4"},
				DeviceNodes: []*cdispecs.DeviceNode{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}},
				Mounts:      []*cdispecs.Mount{{HostPath: "/usr/lib/libcuda.so.1", ContainerPath: "/usr/lib/libcuda.so.1", Options: []string{"ro", "nosuid", "nodev", "bind"}}},
				Hooks:       []*cdispecs.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}},
			},
			want: &specs.Spec{
				Process: &specs.Process{Env: []string{"A=1", "B=3", "C=4"}},
				Mounts:  []specs.Mount{{Source: "/usr/lib/libcuda.so.1", Destination: "/usr/lib/libcuda.so.1", Options: []string{"ro", "nosuid", "nodev", "bind"}}},
				Hooks:   &specs.Hooks{CreateContainer: []specs.Hook{{Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}}},
			},
		},
		{
			name:    "invalid edits refused",
			s:       &specs.Spec{},
			e:       &cdispecs.ContainerEdits{Env: []string{"=x"}},
			wantErr: "CDI container edits",
		},
		{
			name:    "unknown hook stage refused",
			s:       &specs.Spec{},
			e:       &cdispecs.ContainerEdits{Hooks: []*cdispecs.Hook{{HookName: "sometime", Path: "/bin/true"}}},
			wantErr: "CDI container edits",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var before []cdispecs.DeviceNode
			for _, d := range tt.e.DeviceNodes {
				before = append(before, *d)
			}
			err := Apply(tt.s, tt.e)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Apply error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range tt.e.DeviceNodes {
				if !reflect.DeepEqual(*d, before[i]) {
					t.Errorf("Apply changed the edits' device node %d: %+v, was %+v", i, *d, before[i])
				}
			}
			if !reflect.DeepEqual(tt.s.Process, tt.want.Process) || !reflect.DeepEqual(tt.s.Mounts, tt.want.Mounts) || !reflect.DeepEqual(tt.s.Hooks, tt.want.Hooks) {
				t.Errorf("Apply:\n got process %+v mounts %+v hooks %+v\nwant process %+v mounts %+v hooks %+v",
					tt.s.Process, tt.s.Mounts, tt.s.Hooks, tt.want.Process, tt.want.Mounts, tt.want.Hooks)
			}
			if len(tt.e.DeviceNodes) > 0 {
				if tt.s.Linux == nil || len(tt.s.Linux.Devices) != 1 || tt.s.Linux.Devices[0].Path != "/dev/nvidia0" || tt.s.Linux.Devices[0].Major != 195 {
					t.Errorf("Apply: linux.devices = %+v, want /dev/nvidia0 195:0", tt.s.Linux)
				}
			}
		})
	}
}

func TestMerge(t *testing.T) {
	a := &cdispecs.ContainerEdits{Env: []string{"A=1"}, IntelRdt: &cdispecs.IntelRdt{ClosID: "a"}}
	b := &cdispecs.ContainerEdits{Env: []string{"B=2"}, IntelRdt: &cdispecs.IntelRdt{ClosID: "b"}, AdditionalGIDs: []uint32{44}}
	for _, tt := range []struct {
		name string
		a, b *cdispecs.ContainerEdits
		want *cdispecs.ContainerEdits
	}{
		{"both nil", nil, nil, nil},
		{"a only", a, nil, &cdispecs.ContainerEdits{Env: []string{"A=1"}, IntelRdt: &cdispecs.IntelRdt{ClosID: "a"}}},
		{"b only", nil, b, &cdispecs.ContainerEdits{Env: []string{"B=2"}, IntelRdt: &cdispecs.IntelRdt{ClosID: "b"}, AdditionalGIDs: []uint32{44}}},
		{"lists appended, b's intelRdt wins", a, b, &cdispecs.ContainerEdits{Env: []string{"A=1", "B=2"}, IntelRdt: &cdispecs.IntelRdt{ClosID: "b"}, AdditionalGIDs: []uint32{44}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Merge(tt.a, tt.b)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Merge = %+v, want %+v", got, tt.want)
			}
		})
	}
	if !reflect.DeepEqual(a.Env, []string{"A=1"}) || !reflect.DeepEqual(b.Env, []string{"B=2"}) {
		t.Errorf("Merge changed its inputs: %v, %v", a.Env, b.Env)
	}
}
