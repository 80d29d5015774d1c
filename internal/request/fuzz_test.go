package request

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/requirements"
)

// FuzzFromSpec feeds arbitrary values to the request variables: FromSpec
// must either fail with an *Error or return a consistent request.
func FuzzFromSpec(f *testing.F) {
	f.Add("all", "", "", "", "", "", "", false)
	f.Add("0,1", "compute,utility", require130, "", "0,1", "", "", true)
	f.Add("", "", "", "12.2.0", "", "", "", false)
	f.Add("none", "all", "cuda>=abc", "", "all", "true", "all", false)
	f.Add("void,0", "graphics,gpu", "", "", "", "yes", "", true)
	f.Add("nvidia.com/gpu=0,GPU-x", " ", "arch>=8.0 brand=tesla", "x", "-1", "0", "", false)
	f.Add(" , ,", "compat32", "", "10", "1048576", "", "all", true)
	f.Fuzz(func(t *testing.T, visible, capsVal, require, cudaVersion, imex, disable, mig string, privileged bool) {
		env := []string{"PATH=/bin"}
		for k, v := range map[string]string{
			EnvVisibleDevices: visible, EnvDriverCapabilities: capsVal, EnvRequireCUDA: require,
			EnvCUDAVersion: cudaVersion, EnvIMEXChannels: imex, EnvDisableRequire: disable, EnvMIGConfigDevices: mig,
		} {
			if v != "" {
				env = append(env, k+"="+v)
			}
		}
		for _, cfg := range []*config.Config{config.Default(), strictConfig()} {
			r, err := FromSpec(spec(privileged, env...), cfg)
			if err != nil {
				var re *Error
				if !errors.As(err, &re) {
					t.Fatalf("FromSpec: error %T (%v), want *Error", err, err)
				}
				if strings.ContainsAny(err.Error(), "\n\r") {
					t.Fatalf("FromSpec: error %q is not one line", err)
				}
				return
			}
			kinds := 0
			for _, b := range []bool{r.Void, r.All, r.None, len(r.Devices)+len(r.CDIDevices) > 0 && !r.All} {
				if b {
					kinds++
				}
			}
			if kinds != 1 {
				t.Fatalf("request is not exactly one of void/all/none/list: %+v", r)
			}
			if r.All && (len(r.Devices) != 1 || r.Devices[0] != "all") {
				t.Fatalf("all with devices %q", r.Devices)
			}
			for _, d := range r.Devices {
				if d == "" || strings.ContainsAny(d, ",") || strings.TrimSpace(d) != d {
					t.Fatalf("bad device token %q", d)
				}
			}
			if r.DisableRequire && len(r.Requirements) > 0 {
				t.Fatalf("requirements %q with DisableRequire", r.Requirements)
			}
			for _, req := range r.Requirements {
				if again, err := requirements.Parse(req.String()); err != nil || again.String() != req.String() {
					t.Fatalf("requirement %q does not render back to itself: %v", req, err)
				}
			}
			supported, _ := cfg.SupportedCapabilities()
			for c := range r.Caps {
				if !supported.Has(c) {
					t.Fatalf("capability %s not supported", c)
				}
			}
			if !r.Privileged && (r.MIGConfig || r.MIGMonitor) {
				t.Fatalf("MIG request in an unprivileged container")
			}
		}
	})
}

func strictConfig() *config.Config {
	c := config.Default()
	c.AcceptEnvvarUnprivileged = false
	c.SupportedDriverCapabilities = "compute,utility"
	return c
}

// FuzzCUDAMajorMinor: any CUDA_VERSION value is read without a panic, and
// an accepted one starts with the major.minor it gives.
func FuzzCUDAMajorMinor(f *testing.F) {
	for _, s := range []string{"12.4.1", "v11.2", "11", "11.2.1-rc.1+b3", "011.2", "11.2-rc1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		major, minor, ok := cudaMajorMinor(v)
		if !ok {
			return
		}
		prefix := fmt.Sprintf("%d", major)
		if rest := strings.TrimPrefix(strings.TrimPrefix(v, "v"), prefix); !strings.HasPrefix(rest, "."+fmt.Sprint(minor)) && !(minor == 0 && (rest == "" || strings.HasPrefix(rest, ".0"))) {
			t.Errorf("cudaMajorMinor(%q) = %d.%d", v, major, minor)
		}
	})
}
