package request

import (
	"errors"
	"fmt"
	"reflect"
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

// FuzzParseState checks that any stdin either parses to a state with a
// positive pid and a bundle or fails with an error.
func FuzzParseState(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/run/b"}`,
		`{"pid":7,"bundlePath":"/var/run/docker/b"}`, `{"pid":"1"}`, `[]`, `null`, ``, `{"pid":1e99,"bundle":"/b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseState(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "OCI state: ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if s.Pid <= 0 || s.Bundle == "" {
			t.Fatalf("accepted state %+v", s)
		}
	})
}

// FuzzDecodeState checks that DecodeState never panics, words every error
// with "OCI state: ", agrees with ParseState (which accepts exactly the
// decoded states with a positive pid and a bundle) and reads root the same.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/run/b","annotations":{"a":"b"}}`,
		`{"pid":7,"bundlePath":"/var/run/docker/b"}`, `{"root":"/r"}`, `{"root":"rootfs","bundle":"/b"}`,
		`{"root":{"path":"rootfs"},"pid":1,"bundle":"/b"}`, `{"root":null}`, `{"bundlePath":"x"}`,
		`{"pid":"1"}`, `{"annotations":{"a":1}}`, `[]`, `null`, `"s"`, ``, `{`, `{"pid":1e99,"bundle":"/b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, derr := DecodeState(data)
		p, perr := ParseState(data)
		for _, err := range []error{derr, perr} {
			if err != nil && !strings.HasPrefix(err.Error(), "OCI state: ") {
				t.Fatalf("error without context: %v", err)
			}
		}
		if derr != nil {
			if perr == nil && !strings.Contains(derr.Error(), `field "root"`) {
				t.Fatalf("DecodeState failed (%v) but ParseState accepted %+v", derr, p)
			}
			return
		}
		if wantOK := d.Pid > 0 && d.Bundle != ""; wantOK != (perr == nil) {
			t.Fatalf("DecodeState = %+v but ParseState error %v", d, perr)
		}
		if perr == nil && !reflect.DeepEqual(d, p) {
			t.Fatalf("DecodeState = %+v, ParseState = %+v", d, p)
		}
	})
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
