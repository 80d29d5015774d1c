package procfs

import (
	"bytes"
	"strings"
	"testing"
)

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{versionProprietary, versionOpen, versionAarch64, versionArmProp, versionPPC, versionTwoPart,
		"NVRM version: NVIDIA UNIX Open Kernel Module for", "NVRM version: Kernel Module x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseVersion(data)
		if err != nil {
			if v != (Version{}) {
				t.Fatalf("non-zero Version %+v with error %v", v, err)
			}
			return
		}
		if !validVersion(v.NVRM) || !strings.Contains(v.Raw, v.NVRM) || strings.ContainsAny(v.Raw, "\n") {
			t.Fatalf("bad result %+v", v)
		}
	})
}

func FuzzParseGPUInformation(f *testing.F) {
	for _, s := range []string{h100Information, "Bus Location: 0:1:2.3\nDevice Minor: 1\nGPU Excluded: Yes\n", "Model: x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGPUInformation(data)
		if err != nil {
			if g != (GPUInfo{}) {
				t.Fatalf("non-zero GPUInfo %+v with error %v", g, err)
			}
			return
		}
		if n, err := NormalizeBusID(g.BusLocation); err != nil || n != g.BusID {
			t.Fatalf("BusLocation %q BusID %q: %q %v", g.BusLocation, g.BusID, n, err)
		}
		if g.Minor < 0 || g.Minor >= maxMinor || g.IRQ < 0 || (!g.Excluded && !validGPUUUID(g.UUID)) {
			t.Fatalf("bad result %+v", g)
		}
	})
}

func FuzzNormalizeBusID(f *testing.F) {
	for _, s := range []string{"0000:41:00.0", "41:00.0", "00000000:41:00.0", "cfdd:00:00.0", "0:0:1f.7", "", "junk", "0000:41:00.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := NormalizeBusID(s)
		if err != nil {
			if n != "" {
				t.Fatalf("%q: result %q with error %v", s, n, err)
			}
			return
		}
		if len(n) != len("00000000:41:00.0") || strings.ToLower(n) != n {
			t.Fatalf("%q -> %q: not canonical", s, n)
		}
		if again, err := NormalizeBusID(n); err != nil || again != n {
			t.Fatalf("%q -> %q -> %q %v: not idempotent", s, n, again, err)
		}
		d1, b1, v1, f1, err1 := parseBusID(s)
		d2, b2, v2, f2, err2 := parseBusID(n)
		if err1 != nil || err2 != nil || d1 != d2 || b1 != b2 || v1 != v2 || f1 != f2 {
			t.Fatalf("%q -> %q: address changed", s, n)
		}
	})
}

func FuzzParseDevices(f *testing.F) {
	for _, s := range []string{procDevices, "Character devices:\n195 nvidia-frontend\n", "Block devices:\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDevices(data)
		if err != nil {
			return
		}
		for _, dev := range append(d.Char, d.Block...) {
			if dev.Major > maxMajor || dev.Name == "" || strings.ContainsAny(dev.Name, "\n") {
				t.Fatalf("bad device %+v", dev)
			}
			if _, ok := d.CharMajor(dev.Name); !ok && slicesContains(d.Char, dev) {
				t.Fatalf("CharMajor(%q) not found", dev.Name)
			}
		}
		d.GPUMajor()
	})
}

func slicesContains(ds []Device, d Device) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

func FuzzParseMIGMinors(f *testing.F) {
	for _, s := range []string{"config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n", "config 1\nconfig 2\n", "x", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMIGMinors(data)
		if err != nil {
			if m != nil {
				t.Fatalf("non-nil map with error %v", err)
			}
			return
		}
		for k, v := range m {
			if k == "" || strings.ContainsAny(k, " \t\n") || v > maxCapMinor {
				t.Fatalf("bad entry %q %d", k, v)
			}
		}
	})
}

func FuzzParseParams(f *testing.F) {
	for _, s := range []string{params, "ModifyDeviceFiles: 1", "ModifyDeviceFiles:\t1\r\n", "a", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		out := DisableDeviceFileModification(data)
		if !bytes.Equal(data, orig) {
			t.Fatal("input modified")
		}
		if len(out) != len(data) {
			t.Fatalf("length changed %d -> %d", len(data), len(out))
		}
		for i := range out {
			if out[i] != data[i] && !(data[i] == '1' && out[i] == '0') {
				t.Fatalf("byte %d changed %q -> %q", i, data[i], out[i])
			}
		}
		ps, err := ParseParams(data)
		if err != nil {
			return
		}
		ps2, err := ParseParams(out)
		if err != nil || len(ps2) != len(ps) {
			t.Fatalf("rewritten params do not parse alike: %v", err)
		}
		if v, ok := ps2.Get(ParamModifyDeviceFiles); ok && strings.Trim(v, "\r") == "1" {
			t.Fatalf("ModifyDeviceFiles still 1 in %q", out)
		}
	})
}

func FuzzParseCapAccess(f *testing.F) {
	for _, s := range []string{"DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n", "DeviceFileMinor: 1", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCapAccessFile(data)
		if err != nil {
			return
		}
		if c.Minor > maxCapMinor || c.Mode > 0o7777 {
			t.Fatalf("bad result %+v", c)
		}
	})
}
