package request

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/discover"
)

// TestFeatures: NVIDIA_GDS, NVIDIA_MOFED, NVIDIA_GDRCOPY and
// NVIDIA_NVSWITCH ask for their devices with exactly "enabled", and only in
// a container that asks for devices.
func TestFeatures(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want []discover.Feature
	}{
		{"none asked", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil},
		{"gds", []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled"}, []discover.Feature{discover.FeatureGDS}},
		{"every feature, NVIDIA's order", []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_NVSWITCH=enabled", "NVIDIA_GDRCOPY=enabled", "NVIDIA_MOFED=enabled", "NVIDIA_GDS=enabled"},
			[]discover.Feature{discover.FeatureGDS, discover.FeatureMOFED, discover.FeatureGDRCopy, discover.FeatureNVSwitch}},
		{"with none", []string{"NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_MOFED=enabled"}, []discover.Feature{discover.FeatureMOFED}},
		{"other spellings ignored", []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=Enabled", "NVIDIA_MOFED=true", "NVIDIA_GDRCOPY=1", "NVIDIA_NVSWITCH= enabled"}, nil},
		{"last definition wins", []string{"NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled", "NVIDIA_GDS=disabled"}, nil},
		{"void: nothing", []string{"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_GDS=enabled"}, nil},
		{"no device request: nothing", []string{"NVIDIA_GDS=enabled"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := FromSpec(spec(false, tt.env...), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Features, tt.want) {
				t.Errorf("Features = %v, want %v", r.Features, tt.want)
			}
		})
	}
}

// TestKinds: cdi mode's default-kind qualifies plain ids, the runtime's own
// kind (runtime.nvidia.com/gpu) becomes plain ids for the planner, from the
// environment, annotations and volume mounts alike.
func TestKinds(t *testing.T) {
	cdiMode := func(kind string) *config.Config {
		return cfgWith(func(c *config.Config) {
			c.Runtime.Mode = config.ModeCDI
			if kind != "" {
				c.Runtime.Modes.CDI.DefaultKind = kind
			}
		})
	}
	mounts := cfgWith(func(c *config.Config) { c.AcceptDeviceListAsVolumeMounts = true })
	tests := []struct {
		name         string
		spec         *specs.Spec
		cfg          *config.Config
		devices, cdi []string
		all, none    bool
		void         bool
	}{
		{name: "auto mode: plain ids stay plain", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=0,1"), devices: []string{"0", "1"}},
		{name: "cdi mode: default kind", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=0,GPU-1"), cfg: cdiMode(""),
			cdi: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1"}},
		{name: "cdi mode: all with the operator's kind", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=all"), cfg: cdiMode("management.nvidia.com/gpu"),
			cdi: []string{"management.nvidia.com/gpu=all"}},
		{name: "cdi mode: none", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=none"), cfg: cdiMode(""), cdi: []string{"nvidia.com/gpu=none"}},
		{name: "cdi mode: qualified names kept", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=0,example.com/net=a"), cfg: cdiMode(""),
			cdi: []string{"nvidia.com/gpu=0", "example.com/net=a"}},
		{name: "cdi mode: void stays void", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=void"), cfg: cdiMode(""), void: true},
		{name: "cdi mode: legacy image", spec: spec(false, "CUDA_VERSION=12.2"), cfg: cdiMode(""), cdi: []string{"nvidia.com/gpu=all"}},
		{name: "jit kind", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=0,runtime.nvidia.com/gpu=GPU-x"), devices: []string{"0", "GPU-x"}},
		{name: "jit kind all", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=all"), devices: []string{"all"}, all: true},
		{name: "jit kind none", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=none"), none: true},
		{name: "jit kind as default kind", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=1"), cfg: cdiMode("runtime.nvidia.com/gpu"), devices: []string{"1"}},
		{name: "jit kind in annotations", spec: withAnnotations(spec(false), map[string]string{"cdi.k8s.io/a": "runtime.nvidia.com/gpu=1"}), devices: []string{"1"}},
		{name: "other runtime.nvidia.com classes are CDI names", spec: spec(false, "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gds=all"), cdi: []string{"runtime.nvidia.com/gds=all"}},
		{name: "volume mounts of CDI names", spec: withMounts(spec(false, "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"),
			devMount("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"), devMount("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=GPU-1")),
			cfg: mounts, cdi: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1"}},
		{name: "volume mounts of jit names", spec: withMounts(spec(false), devMount("/var/run/nvidia-container-devices/cdi/runtime.nvidia.com/gpu/1")),
			cfg: mounts, devices: []string{"1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := FromSpec(tt.spec, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Void != tt.void || r.All != tt.all || r.None != tt.none || !reflect.DeepEqual(r.Devices, tt.devices) || !reflect.DeepEqual(r.CDIDevices, tt.cdi) {
				t.Errorf("got void=%v all=%v none=%v devices=%q cdi=%q,\nwant void=%v all=%v none=%v devices=%q cdi=%q",
					r.Void, r.All, r.None, r.Devices, r.CDIDevices, tt.void, tt.all, tt.none, tt.devices, tt.cdi)
			}
		})
	}
}

// TestKindsErrors: the runtime's own kind mixed with other CDI devices is
// refused, as NVIDIA does; an invalid default kind is an invalid name.
func TestKindsErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  string
		cfg  *config.Config
		is   error
		want string
	}{
		{"jit with cdi", "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=0,nvidia.com/gpu=1", nil, ErrJITMixed, "cannot be requested together"},
		{"jit default kind with cdi", "NVIDIA_VISIBLE_DEVICES=0,nvidia.com/gpu=1",
			cfgWith(func(c *config.Config) { c.Runtime.Mode, c.Runtime.Modes.CDI.DefaultKind = config.ModeCDI, JITKind }), ErrJITMixed, "cannot be requested together"},
		{"invalid default kind", "NVIDIA_VISIBLE_DEVICES=0",
			cfgWith(func(c *config.Config) { c.Runtime.Mode, c.Runtime.Modes.CDI.DefaultKind = config.ModeCDI, "gpu" }), nil, `invalid CDI device name "gpu=0"`},
		{"invalid jit name", "NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=a/b", nil, nil, `invalid CDI device name "runtime.nvidia.com/gpu=a/b"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSpec(spec(false, tt.env), tt.cfg)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromSpec = %v, want %q", err, tt.want)
			}
		})
	}
}
