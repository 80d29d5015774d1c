package request

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/phase"
	"github.com/nctk/nctk/internal/requirements"
)

// spec builds an OCI spec with an environment, optionally privileged.
func spec(privileged bool, env ...string) *specs.Spec {
	s := &specs.Spec{Process: &specs.Process{Env: env, Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}}}
	if privileged {
		s.Process.Capabilities.Bounding = append(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")
	}
	return s
}

func devMount(dst string) specs.Mount {
	return specs.Mount{Source: "/dev/null", Destination: dst, Type: "bind", Options: []string{"bind", "ro"}}
}

func cfgWith(mod func(*config.Config)) *config.Config {
	c := config.Default()
	if mod != nil {
		mod(c)
	}
	return c
}

func capSet(cs ...caps.Capability) caps.Set {
	s := caps.Set{}
	for _, c := range cs {
		s[c] = true
	}
	return s
}

// exprs parses requirement expressions, panicking on a syntax error (for
// table literals).
func exprs(reqs ...string) []requirements.Expr {
	out := make([]requirements.Expr, len(reqs))
	for i, r := range reqs {
		e, err := requirements.Parse(r)
		if err != nil {
			panic(err)
		}
		out[i] = e
	}
	return out
}

const require130 = "cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 brand=tesla,driver>=535,driver<536"

func TestFromSpec(t *testing.T) {
	volumeMounts := func(c *config.Config) { c.AcceptDeviceListAsVolumeMounts = true }
	strict := func(c *config.Config) { c.AcceptEnvvarUnprivileged = false }
	tests := []struct {
		name string
		spec *specs.Spec
		cfg  *config.Config
		want Request
	}{
		{"unset is void", spec(false, "PATH=/bin"), nil, Request{Void: true}},
		{"empty is void", spec(false, "NVIDIA_VISIBLE_DEVICES="), nil, Request{Void: true}},
		{"blank is void", spec(false, "NVIDIA_VISIBLE_DEVICES=  "), nil, Request{Void: true}},
		{"void", spec(false, "NVIDIA_VISIBLE_DEVICES=void"), nil, Request{Void: true, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"void anywhere wins", spec(false, "NVIDIA_VISIBLE_DEVICES=all,void"), nil, Request{Void: true, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"no process", &specs.Spec{}, nil, Request{Void: true}},
		{"all", spec(false, "NVIDIA_VISIBLE_DEVICES=all"), nil,
			Request{All: true, Devices: []string{"all"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"first special token wins", spec(false, "NVIDIA_VISIBLE_DEVICES=0,none,all"), nil,
			Request{None: true, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"none", spec(false, "NVIDIA_VISIBLE_DEVICES=none"), nil,
			Request{None: true, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"list in order, trimmed", spec(false, "NVIDIA_VISIBLE_DEVICES= 3, GPU-abc ,,1:0,MIG-x,00000000:41:00.0"), nil,
			Request{Devices: []string{"3", "GPU-abc", "1:0", "MIG-x", "00000000:41:00.0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"last definition wins", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=1"), nil,
			Request{Devices: []string{"1"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"cdi names kept apart", spec(false, "NVIDIA_VISIBLE_DEVICES=0,nvidia.com/gpu=1,nvidia.com/gpu=all"), nil,
			Request{Devices: []string{"0"}, CDIDevices: []string{"nvidia.com/gpu=1", "nvidia.com/gpu=all"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"caps all", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"), nil,
			Request{Devices: []string{"0"}, Caps: caps.Full(), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"caps list", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES= graphics, video,"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Graphics, caps.Video), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"caps default within supported", spec(false, "NVIDIA_VISIBLE_DEVICES=0"), cfgWith(func(c *config.Config) { c.SupportedDriverCapabilities = "utility,graphics" }),
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"caps all within supported", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"), cfgWith(func(c *config.Config) { c.SupportedDriverCapabilities = "utility,compute" }),
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"requirements in env order, jetpack and empty skipped", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA="+require130, "NVIDIA_REQUIRE_JETPACK=csv-mounts=all", "NVIDIA_REQUIRE_ARCH=arch>=8.0", "NVIDIA_REQUIRE_EMPTY= ", "CUDA_VERSION=13.0.0"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), Requirements: exprs(require130, "arch>=8.0"), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"disable require", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99", "NVIDIA_DISABLE_REQUIRE=true"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DisableRequire: true, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"disable require skips validation", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=abc", "NVIDIA_DISABLE_REQUIRE=1"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DisableRequire: true, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"disable require false", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12", "NVIDIA_DISABLE_REQUIRE=false"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), Requirements: exprs("cuda>=12"), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"disable require not a bool warns", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12", "NVIDIA_DISABLE_REQUIRE=yes"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), Requirements: exprs("cuda>=12"), DeviceSource: "NVIDIA_VISIBLE_DEVICES",
				Warnings: []string{`NVIDIA_DISABLE_REQUIRE="yes" is not a boolean (true or false): requirements are checked`}}},
		{"config disable-require", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=99"), cfgWith(func(c *config.Config) { c.DisableRequire = true }),
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DisableRequire: true, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"legacy image", spec(false, "CUDA_VERSION=12.2.0"), nil,
			Request{All: true, Legacy: true, Devices: []string{"all"}, Caps: caps.Full(), Requirements: exprs("cuda>=12.2"), DeviceSource: "CUDA_VERSION"}},
		{"legacy image, empty NVIDIA_REQUIRE_CUDA", spec(false, "CUDA_VERSION=11.8", "NVIDIA_REQUIRE_CUDA="), nil,
			Request{All: true, Legacy: true, Devices: []string{"all"}, Caps: caps.Full(), Requirements: exprs("cuda>=11.8"), DeviceSource: "CUDA_VERSION"}},
		{"legacy image, empty NVIDIA_DRIVER_CAPABILITIES: the default, as NVIDIA's hook", spec(false, "CUDA_VERSION=12.2.0", "NVIDIA_DRIVER_CAPABILITIES="), nil,
			Request{All: true, Legacy: true, Devices: []string{"all"}, Caps: caps.Default(), Requirements: exprs("cuda>=12.2"), DeviceSource: "CUDA_VERSION"}},
		{"legacy image, major only", spec(false, "CUDA_VERSION=10", "NVIDIA_DRIVER_CAPABILITIES=utility"), nil,
			Request{All: true, Legacy: true, Devices: []string{"all"}, Caps: capSet(caps.Utility), Requirements: exprs("cuda>=10.0"), DeviceSource: "CUDA_VERSION"}},
		{"legacy image, caps within supported", spec(false, "CUDA_VERSION=12.2.0"), cfgWith(func(c *config.Config) { c.SupportedDriverCapabilities = "compute,utility" }),
			Request{All: true, Legacy: true, Devices: []string{"all"}, Caps: capSet(caps.Utility, caps.Compute), Requirements: exprs("cuda>=12.2"), DeviceSource: "CUDA_VERSION"}},
		{"legacy image with devices set", spec(false, "CUDA_VERSION=12.2.0", "NVIDIA_VISIBLE_DEVICES=1"), nil,
			Request{Legacy: true, Devices: []string{"1"}, Caps: caps.Full(), Requirements: exprs("cuda>=12.2"), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"legacy image with devices empty is void", spec(false, "CUDA_VERSION=12.2.0", "NVIDIA_VISIBLE_DEVICES="), nil, Request{Void: true, Legacy: true}},
		{"not legacy with NVIDIA_REQUIRE_CUDA", spec(false, "CUDA_VERSION=12.2.0", "NVIDIA_REQUIRE_CUDA=cuda>=12.2"), nil, Request{Void: true}},
		{"swarm resource replaces", spec(false, "NVIDIA_VISIBLE_DEVICES=all", "DOCKER_RESOURCE_GPU=GPU-a,GPU-b"), cfgWith(func(c *config.Config) { c.SwarmResource = "DOCKER_RESOURCE_GPU,DOCKER_RESOURCE_NVIDIA" }),
			Request{Devices: []string{"GPU-a", "GPU-b"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "DOCKER_RESOURCE_GPU"}},
		{"swarm resources concatenated", spec(false, "DOCKER_RESOURCE_NVIDIA=2", "DOCKER_RESOURCE_GPU=1"), cfgWith(func(c *config.Config) { c.SwarmResource = "DOCKER_RESOURCE_GPU, DOCKER_RESOURCE_NVIDIA" }),
			Request{Devices: []string{"1", "2"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "DOCKER_RESOURCE_GPU,DOCKER_RESOURCE_NVIDIA"}},
		{"swarm resource unset falls back", spec(false, "NVIDIA_VISIBLE_DEVICES=0"), cfgWith(func(c *config.Config) { c.SwarmResource = "DOCKER_RESOURCE_GPU" }),
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"unprivileged env refused", spec(false, "NVIDIA_VISIBLE_DEVICES=all"), cfgWith(strict),
			Request{Void: true, Warnings: []string{"ignoring the devices requested by NVIDIA_VISIBLE_DEVICES in an unprivileged container (accept-nvidia-visible-devices-envvar-when-unprivileged = false)"}}},
		{"unprivileged legacy refused", spec(false, "CUDA_VERSION=12.2"), cfgWith(strict),
			Request{Void: true, Legacy: true, Warnings: []string{"ignoring the devices requested by CUDA_VERSION (legacy image: all GPUs) in an unprivileged container (accept-nvidia-visible-devices-envvar-when-unprivileged = false)"}}},
		{"privileged env accepted", spec(true, "NVIDIA_VISIBLE_DEVICES=0"), cfgWith(strict),
			Request{Privileged: true, Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"volume mounts ignored unless configured", withMounts(spec(false), devMount("/var/run/nvidia-container-devices/0")), nil, Request{Void: true}},
		{"volume mounts", withMounts(spec(false, "NVIDIA_VISIBLE_DEVICES=all"),
			devMount("/var/run/nvidia-container-devices/1"), devMount("/var/run/nvidia-container-devices//GPU-x/"), devMount("/var/run/nvidia-container-devices/1"),
			specs.Mount{Source: "/tmp/x", Destination: "/var/run/nvidia-container-devices/2"}, devMount("/var/run/other/3"),
			devMount("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"), devMount("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=1")),
			cfgWith(volumeMounts),
			Request{Devices: []string{"1", "GPU-x"}, CDIDevices: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "volume-mounts"}},
		{"volume mount all, unprivileged strict", withMounts(spec(false), devMount("/var/run/nvidia-container-devices/all")), cfgWith(func(c *config.Config) { volumeMounts(c); strict(c) }),
			Request{All: true, Devices: []string{"all"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "volume-mounts"}},
		{"volume mounts empty fall back to env", spec(false, "NVIDIA_VISIBLE_DEVICES=2"), cfgWith(volumeMounts),
			Request{Devices: []string{"2"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"annotations first", withAnnotations(withMounts(spec(false, "NVIDIA_VISIBLE_DEVICES=all"), devMount("/var/run/nvidia-container-devices/1")),
			map[string]string{"cdi.k8s.io/z": "nvidia.com/gpu=1", "cdi.k8s.io/a": "nvidia.com/gpu=0, nvidia.com/gpu=2", "other": "x"}), cfgWith(volumeMounts),
			Request{CDIDevices: []string{"nvidia.com/gpu=0", "nvidia.com/gpu=2", "nvidia.com/gpu=1"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "annotations"}},
		{"annotations ignored in legacy mode", withAnnotations(spec(false, "NVIDIA_VISIBLE_DEVICES=0"), map[string]string{"cdi.k8s.io/a": "nvidia.com/gpu=1"}), cfgWith(func(c *config.Config) { c.Runtime.Mode = "legacy" }),
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"mig privileged", spec(true, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=all"), nil,
			Request{Privileged: true, Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), MIGConfig: true, MIGMonitor: true, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"mig ignored when void", spec(false, "NVIDIA_MIG_CONFIG_DEVICES=all"), nil, Request{Void: true}},
		{"imex channels", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=0, 1,1,007"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), IMEXChannels: []int{0, 1, 7}, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"imex all ignored", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=all"), nil,
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES",
				Warnings: []string{`NVIDIA_IMEX_CHANNELS="all": "all" is not honoured for IMEX channels; name the channels`}}},
		{"imex requests ignored by feature", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=x"), cfgWith(func(c *config.Config) { c.Features.IgnoreIMEXChannelRequests = true }),
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"imex from mounts first", withMounts(spec(true, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=5"), devMount("/var/run/nvidia-container-devices/imex/3")), cfgWith(volumeMounts),
			Request{Privileged: true, Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), IMEXChannels: []int{3}, DeviceSource: "NVIDIA_VISIBLE_DEVICES"}},
		{"imex env unprivileged strict", withMounts(spec(false, "NVIDIA_IMEX_CHANNELS=5"), devMount("/var/run/nvidia-container-devices/0")), cfgWith(func(c *config.Config) { volumeMounts(c); strict(c) }),
			Request{Devices: []string{"0"}, Caps: capSet(caps.Utility, caps.Compute), DeviceSource: "volume-mounts",
				Warnings: []string{"ignoring the IMEX channels requested by NVIDIA_IMEX_CHANNELS in an unprivileged container (accept-nvidia-visible-devices-envvar-when-unprivileged = false)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromSpec(tt.spec, tt.cfg)
			if err != nil {
				t.Fatalf("FromSpec: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("FromSpec =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func withMounts(s *specs.Spec, m ...specs.Mount) *specs.Spec {
	s.Mounts = append(s.Mounts, m...)
	return s
}

func withAnnotations(s *specs.Spec, a map[string]string) *specs.Spec { s.Annotations = a; return s }

func TestFromSpecErrors(t *testing.T) {
	tests := []struct {
		name string
		spec *specs.Spec
		cfg  *config.Config
		want string
	}{
		{"unknown capability", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,gpu"),
			nil, `container request: NVIDIA_DRIVER_CAPABILITIES="compute,gpu": unknown driver capability "gpu"`},
		{"unsupported capability", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=graphics"),
			cfgWith(func(c *config.Config) {
				c.SupportedDriverCapabilities = "compute,utility"
				c.Path = "/etc/nvidia-container-runtime/config.toml"
			}),
			`NVIDIA_DRIVER_CAPABILITIES="graphics": capability graphics is not supported by this host (supported-driver-capabilities = "compute,utility" in /etc/nvidia-container-runtime/config.toml)`},
		{"bad requirement", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=abc"),
			nil, `requirement error: container request: NVIDIA_REQUIRE_CUDA="cuda>=abc": invalid expression "cuda>=abc"`},
		{"bad CUDA_VERSION", spec(false, "CUDA_VERSION=twelve"), nil, `CUDA_VERSION="twelve": not a CUDA version`},
		{"mig unprivileged", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES=all"),
			nil, `NVIDIA_MIG_CONFIG_DEVICES="all": only a privileged container (CAP_SYS_ADMIN in its bounding set) may ask`},
		{"mig monitor unprivileged", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_MONITOR_DEVICES=all"), nil, `NVIDIA_MIG_MONITOR_DEVICES="all": only a privileged`},
		{"bad imex", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=0,-1"), nil, `input error: container request: NVIDIA_IMEX_CHANNELS="0,-1": invalid IMEX channel: -1 (want a decimal number from 0 to 1048575)`},
		{"imex too big", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=1048576"), nil, `invalid IMEX channel: 1048576`},
		{"bad cdi name", spec(false, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu="), nil, `NVIDIA_VISIBLE_DEVICES="nvidia.com/gpu=": invalid CDI device name "nvidia.com/gpu="`},
		{"bad annotation", withAnnotations(spec(false), map[string]string{"cdi.k8s.io/x": "gpu0"}), nil, `annotation cdi.k8s.io/x="gpu0": invalid CDI device name "gpu0"`},
		{"bad cdi mount", withMounts(spec(false), devMount("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu")),
			cfgWith(func(c *config.Config) { c.AcceptDeviceListAsVolumeMounts = true }), `mount="/var/run/nvidia-container-devices/cdi/nvidia.com/gpu": invalid CDI device name`},
		{"bad unsupported config", spec(false, "NVIDIA_VISIBLE_DEVICES=0"), cfgWith(func(c *config.Config) { c.SupportedDriverCapabilities = "bogus" }), `supported-driver-capabilities = "bogus"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSpec(tt.spec, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromSpec = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := FromSpec(nil, nil); err == nil {
		t.Error("nil spec: no error")
	}
	var re *Error
	_, err := FromSpec(spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X=bad"), nil)
	if !errors.As(err, &re) || re.Var != "NVIDIA_REQUIRE_X" || re.Value != "bad" {
		t.Errorf("error = %#v", err)
	}
}

// TestFromSpecPhases: errors carry the phase nvidia-container-cli would
// name (errors.As finds it) and an *Error naming the variable, and the
// phase is printed once.
func TestFromSpecPhases(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		phase phase.Phase
		v     string
		text  string
	}{
		// Only separators: a mistake, not a non-GPU container (NVIDIA
		// drops the empty items and treats it as void).
		{"only separators", []string{"NVIDIA_VISIBLE_DEVICES= , ,"}, phase.Input, "NVIDIA_VISIBLE_DEVICES",
			`input error: container request: NVIDIA_VISIBLE_DEVICES=" , ,": the device list has only separators; name devices, or all, none or void`},
		{"only a comma", []string{"NVIDIA_VISIBLE_DEVICES=,"}, phase.Input, "NVIDIA_VISIBLE_DEVICES",
			`input error: container request: NVIDIA_VISIBLE_DEVICES=",": the device list has only separators; name devices, or all, none or void`},
		{"malformed requirement", []string{"NVIDIA_REQUIRE_ARCH=arch>>8"}, phase.Requirement, "NVIDIA_REQUIRE_ARCH",
			`requirement error: container request: NVIDIA_REQUIRE_ARCH="arch>>8": invalid expression "arch>>8": "arch>>8": unknown operator ">>" (want = != < <= > >=)`},
		{"mig-config not all", []string{"NVIDIA_MIG_CONFIG_DEVICES=0"}, phase.MIGConfig, "NVIDIA_MIG_CONFIG_DEVICES",
			`mig-config error: container request: NVIDIA_MIG_CONFIG_DEVICES="0": only 'all' devices are currently supported`},
		{"mig-monitor not all", []string{"NVIDIA_MIG_MONITOR_DEVICES=1,2"}, phase.MIGMonitor, "NVIDIA_MIG_MONITOR_DEVICES",
			`mig-monitor error: container request: NVIDIA_MIG_MONITOR_DEVICES="1,2": only 'all' devices are currently supported`},
		{"imex", []string{"NVIDIA_IMEX_CHANNELS=x"}, phase.Input, "NVIDIA_IMEX_CHANNELS",
			`input error: container request: NVIDIA_IMEX_CHANNELS="x": invalid IMEX channel: x (want a decimal number from 0 to 1048575)`},
		{"capability", []string{"NVIDIA_DRIVER_CAPABILITIES=gpu"}, phase.Input, "NVIDIA_DRIVER_CAPABILITIES",
			`input error: container request: NVIDIA_DRIVER_CAPABILITIES="gpu": unknown driver capability "gpu" (valid: all, compat32,compute,display,graphics,ngx,utility,video)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSpec(spec(true, append([]string{"NVIDIA_VISIBLE_DEVICES=0"}, tt.env...)...), nil)
			var pe *phase.Error
			var re *Error
			if !errors.As(err, &pe) || pe.Phase != tt.phase || !errors.As(err, &re) || re.Var != tt.v {
				t.Fatalf("FromSpec = %v, want a %s error naming %s", err, tt.phase, tt.v)
			}
			if err.Error() != tt.text {
				t.Errorf("error\n%s\nwant\n%s", err, tt.text)
			}
		})
	}
	var pe *phase.Error
	if _, err := FromSpec(nil, nil); !errors.As(err, &pe) || pe.Phase != phase.Input {
		t.Errorf("nil spec: %v, want an input error", err)
	}
}

// TestOversizedValues: a value over MaxValueLen is refused before it is
// parsed with a short one-line error naming the variable; values with
// control characters are echoed escaped (no second line can be forged).
func TestOversizedValues(t *testing.T) {
	huge := strings.Repeat("cuda>=12.0 ", 10000) // 110,000 bytes
	hugeList := strings.Repeat("0,", 50000)
	tests := []struct {
		name    string
		spec    *specs.Spec
		v       string
		wantErr error
	}{
		{"NVIDIA_VISIBLE_DEVICES", spec(false, "NVIDIA_VISIBLE_DEVICES="+hugeList), EnvVisibleDevices, ErrValueTooLong},
		{"NVIDIA_REQUIRE_CUDA", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA="+huge), EnvRequireCUDA, ErrValueTooLong},
		{"NVIDIA_REQUIRE_other", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_X="+huge), "NVIDIA_REQUIRE_X", ErrValueTooLong},
		{"NVIDIA_DRIVER_CAPABILITIES", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES="+hugeList), EnvDriverCapabilities, ErrValueTooLong},
		{"NVIDIA_IMEX_CHANNELS", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS="+hugeList), EnvIMEXChannels, ErrValueTooLong},
		{"NVIDIA_MIG_CONFIG_DEVICES", spec(true, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_MIG_CONFIG_DEVICES="+hugeList), EnvMIGConfigDevices, ErrValueTooLong},
		{"CUDA_VERSION", spec(false, "CUDA_VERSION="+hugeList), EnvCUDAVersion, ErrValueTooLong},
		{"annotation", withAnnotations(spec(false), map[string]string{"cdi.k8s.io/x": hugeList}), "annotation cdi.k8s.io/x", ErrValueTooLong},
		{"requirement with a newline", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=1\nlevel=error msg=forged"), EnvRequireCUDA, nil},
		{"capability with a newline", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=gpu\nlevel=error msg=forged"), EnvDriverCapabilities, nil},
		{"CDI name with a newline", spec(false, "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=\nlevel=error"), EnvVisibleDevices, nil},
		{"long invalid requirement", spec(false, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA="+strings.Repeat("cuda>=1 ", 3000)+"x"), EnvRequireCUDA, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSpec(tt.spec, nil)
			var re *Error
			if !errors.As(err, &re) || re.Var != tt.v {
				t.Fatalf("FromSpec = %.300v, want an *Error naming %s", err, tt.v)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			msg := err.Error()
			if len(msg) > 600 || strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error is %d bytes or not one line: %q", len(msg), msg)
			}
			if !strings.Contains(msg, tt.v) {
				t.Errorf("error %q does not name %s", msg, tt.v)
			}
		})
	}
}

func TestIMEXChannels(t *testing.T) {
	got, err := IMEXChannels([]string{"3", "0", "03", "1048575"})
	if err != nil || !reflect.DeepEqual(got, []int{3, 0, 1048575}) {
		t.Errorf("IMEXChannels = %v, %v", got, err)
	}
	for _, bad := range []string{"1048576", "-1", "x", "", "4294967296"} {
		if _, err := IMEXChannels([]string{bad}); err == nil || err.Error() != "invalid IMEX channel: "+bad+" (want a decimal number from 0 to 1048575)" {
			t.Errorf("IMEXChannels(%q) = %v", bad, err)
		}
	}
}

func TestMIGDevices(t *testing.T) {
	for v, ok := range map[string]bool{"all": true, "ALL": true, " all ": true, "0": false, "": false, "all,0": false} {
		if err := MIGDevices(v); (err == nil) != ok || (err != nil && !errors.Is(err, ErrMIGNotAll)) {
			t.Errorf("MIGDevices(%q) = %v", v, err)
		}
	}
}

func TestIsPrivileged(t *testing.T) {
	if IsPrivileged(nil) || IsPrivileged(&specs.Spec{}) || IsPrivileged(spec(false)) || !IsPrivileged(spec(true)) {
		t.Error("IsPrivileged")
	}
	s := spec(false)
	s.Process.Capabilities.Effective = []string{"CAP_SYS_ADMIN"}
	if IsPrivileged(s) {
		t.Error("only the bounding set counts")
	}
}

func BenchmarkFromSpec(b *testing.B) {
	s := spec(false, "PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=0,1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics",
		"NVIDIA_REQUIRE_CUDA="+require130, "CUDA_VERSION=13.0.0")
	cfg := config.Default()
	for b.Loop() {
		if _, err := FromSpec(s, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCUDAMajorMinor: CUDA_VERSION values read as NVIDIA 1.20's hook reads
// them (test/parity/testdata/request/hook-env.golden has its answers).
func TestCUDAMajorMinor(t *testing.T) {
	tests := []struct {
		in           string
		major, minor uint64
		ok           bool
	}{
		{"12.4.1", 12, 4, true},
		{"11.2", 11, 2, true},
		{"11", 11, 0, true},
		{"v11.2", 11, 2, true},
		{"0.9", 0, 9, true},
		{"11.2.1-rc1", 11, 2, true},
		{"11.2.1-rc.1+b3.x-y", 11, 2, true},
		{"11.2.1+b3", 11, 2, true},
		{"11.2-rc1", 0, 0, false},
		{"11+b3", 0, 0, false},
		{"11.2.1.4", 0, 0, false},
		{"011.2", 0, 0, false},
		{"11.02", 0, 0, false},
		{" 11.2", 0, 0, false},
		{"11.x", 0, 0, false},
		{"vv11.2", 0, 0, false},
		{"V11.2", 0, 0, false},
		{"11.2.1-01", 0, 0, false},
		{"11.2.1-", 0, 0, false},
		{"11.2.1+", 0, 0, false},
		{"11.2.1+a..b", 0, 0, false},
		{"4294967296.0", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tc := range tests {
		major, minor, ok := cudaMajorMinor(tc.in)
		if ok != tc.ok || major != tc.major || minor != tc.minor {
			t.Errorf("cudaMajorMinor(%q) = %d, %d, %v; want %d, %d, %v", tc.in, major, minor, ok, tc.major, tc.minor, tc.ok)
		}
	}
}

// TestDuplicateDevices: a device or CDI name listed twice is requested
// once.
func TestDuplicateDevices(t *testing.T) {
	r, err := FromSpec(spec(false, "NVIDIA_VISIBLE_DEVICES=0,1,0,nvidia.com/gpu=2,nvidia.com/gpu=2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Devices, []string{"0", "1"}) || !reflect.DeepEqual(r.CDIDevices, []string{"nvidia.com/gpu=2"}) {
		t.Errorf("devices %q, CDI devices %q", r.Devices, r.CDIDevices)
	}
}

// TestPerContainer: the runtime's own per-container devices (NVIDIA's
// jit-cdi mode, or names of JITKind in cdi mode) are marked, so that the
// planner gives them the environment NVIDIA's do; nothing else is.
func TestPerContainer(t *testing.T) {
	for _, tc := range []struct {
		mode, devices string
		want          bool
	}{
		{config.ModeLegacy, "0", false},
		{config.ModeLegacy, "all", false},
		{config.ModeCDI, "nvidia.com/gpu=0", false},
		{config.ModeCDI, JITKind + "=0", true},
		{config.ModeJitCDI, "0", true},
		{config.ModeJitCDI, "all", true},
	} {
		cfg := config.Default()
		cfg.Runtime.Mode = tc.mode
		r, err := FromSpec(spec(false, "NVIDIA_VISIBLE_DEVICES="+tc.devices), cfg)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.mode, tc.devices, err)
		}
		if r.PerContainer != tc.want {
			t.Errorf("%s %s: PerContainer = %v, want %v", tc.mode, tc.devices, r.PerContainer, tc.want)
		}
	}
}
