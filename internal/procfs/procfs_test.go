package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	versionProprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 16 15:48:22 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n"
	versionOpen        = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Apr 21 10:05:48 UTC 2026\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n"
	versionAarch64     = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.133.20  Release Build  (dvs-builder@U16-I3-C04-2-1)  Fri Mar 14 15:32:40 UTC 2025\nGCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n"
	versionArmProp     = "NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.104.05  Sat Aug 19 01:13:16 UTC 2023\nGCC version:  gcc version 11.4.0\n"
	versionPPC         = "NVRM version: NVIDIA UNIX ppc64le Kernel Module  418.226.00  Mon Dec  6 23:44:10 UTC 2021\n"
	versionTwoPart     = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.84  Release Build\n"

	h100Information = "Model: \t\t NVIDIA H100 80GB HBM3\n" +
		"IRQ:   \t\t 34\n" +
		"GPU UUID: \t GPU-3ea6ea3c-4e6b-7e2f-a1e6-5cd1b5a3f0d2\n" +
		"Video BIOS: \t 96.00.99.00.01\n" +
		"Bus Type: \t PCIe\n" +
		"DMA Size: \t 52 bits\n" +
		"DMA Mask: \t 0xfffffffffffff\n" +
		"Bus Location: \t 0000:41:00.0\n" +
		"Device Minor: \t 0\n" +
		"GPU Firmware: \t 580.159.04\n" +
		"GPU Excluded:\t No\n"

	procDevices = "Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  4 ttyS\n  5 /dev/tty\n 10 misc\n195 nvidia\n" +
		"238 nvidia-uvm\n239 nvidia-nvswitch\n240 nvidia-nvlink\n241 nvidia-caps\n242 nvidia-caps-imex-channels\n" +
		"254 ndctl\n\nBlock devices:\n  7 loop\n  8 sd\n 65 sd\n259 blkext\n"

	params = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\n" +
		"DeviceFileMode: 438\nRegistryDwords: \"\"\nExcludedGpus: \"\"\nImexChannelCount: 2048\n"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Version
		err      string
	}{
		{"proprietary", versionProprietary, Version{NVRM: "535.261.03", Arch: "x86_64", GCC: "gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)",
			Raw: "NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 16 15:48:22 UTC 2025"}, ""},
		{"open", versionOpen, Version{NVRM: "580.159.04", Open: true, Arch: "x86_64", GCC: "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)",
			Raw: "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Apr 21 10:05:48 UTC 2026"}, ""},
		{"open aarch64", versionAarch64, Version{NVRM: "570.133.20", Open: true, Arch: "aarch64", GCC: "gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)",
			Raw: "NVIDIA UNIX Open Kernel Module for aarch64  570.133.20  Release Build  (dvs-builder@U16-I3-C04-2-1)  Fri Mar 14 15:32:40 UTC 2025"}, ""},
		{"proprietary aarch64", versionArmProp, Version{NVRM: "535.104.05", Arch: "aarch64", GCC: "gcc version 11.4.0",
			Raw: "NVIDIA UNIX aarch64 Kernel Module  535.104.05  Sat Aug 19 01:13:16 UTC 2023"}, ""},
		{"ppc64le no gcc", versionPPC, Version{NVRM: "418.226.00", Arch: "ppc64le",
			Raw: "NVIDIA UNIX ppc64le Kernel Module  418.226.00  Mon Dec  6 23:44:10 UTC 2021"}, ""},
		{"two-part version no newline", strings.TrimSuffix(versionTwoPart, "\n"), Version{NVRM: "595.84", Open: true, Arch: "x86_64",
			Raw: "NVIDIA UNIX Open Kernel Module for x86_64  595.84  Release Build"}, ""},
		{"crlf", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5\r\n", Version{NVRM: "550.54.15", Arch: "x86_64",
			Raw: "NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5"}, ""},
		{"empty", "", Version{}, `no "NVRM version:" line`},
		{"gcc only", "GCC version: 12\n", Version{}, `no "NVRM version:" line`},
		{"no kernel module", "NVRM version: something else 1.2.3\n", Version{}, `line 1: NVRM version: "something else 1.2.3": no "Kernel Module"`},
		{"no version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module\n", Version{}, `line 1: NVRM version: "NVIDIA UNIX x86_64 Kernel Module": no version after "Kernel Module"`},
		{"open no version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64\n", Version{}, "no version after"},
		{"for no arch", "NVRM version: NVIDIA UNIX Open Kernel Module for\n", Version{}, `no architecture after "Kernel Module for"`},
		{"bad version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  (535)  Wed\n", Version{}, `bad version "(535)"`},
		{"twice", versionProprietary + versionOpen, Version{}, `line 3: second "NVRM version:" line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVersion([]byte(tc.in))
			checkErr(t, err, tc.err)
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

func TestParseGPUInformation(t *testing.T) {
	h100 := GPUInfo{Model: "NVIDIA H100 80GB HBM3", UUID: "GPU-3ea6ea3c-4e6b-7e2f-a1e6-5cd1b5a3f0d2", BusLocation: "0000:41:00.0",
		BusID: "00000000:41:00.0", Minor: 0, IRQ: 34, VideoBIOS: "96.00.99.00.01", BusType: "PCIe", Firmware: "580.159.04"}
	replace := func(old, new string) string {
		if !strings.Contains(h100Information, old) {
			t.Fatalf("sample lacks %q", old)
		}
		return strings.Replace(h100Information, old, new, 1)
	}
	excl := h100
	excl.Excluded = true
	minor7 := h100
	minor7.Minor = 7
	for _, tc := range []struct {
		name, in string
		want     GPUInfo
		err      string
	}{
		{"h100", h100Information, h100, ""},
		{"excluded", replace("GPU Excluded:\t No", "GPU Excluded:\t Yes"), excl, ""},
		{"minor 7 spaces", replace("Device Minor: \t 0", "Device Minor:    7"), minor7, ""},
		{"minimal", "Model:  NVIDIA GeForce RTX 4090\nGPU UUID: GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b\nBus Location: 0000:01:00.0\nDevice Minor: 0\n",
			GPUInfo{Model: "NVIDIA GeForce RTX 4090", UUID: "GPU-9221d5d1-b60b-a624-bf14-0a1819cfda3b", BusLocation: "0000:01:00.0", BusID: "00000000:01:00.0"}, ""},
		{"excluded no uuid", "Bus Location: 0000:01:00.0\nDevice Minor: 3\nGPU Excluded: Yes\n",
			GPUInfo{BusLocation: "0000:01:00.0", BusID: "00000000:01:00.0", Minor: 3, Excluded: true}, ""},
		{"empty", "", GPUInfo{}, `no "Bus Location" line`},
		{"no minor", replace("Device Minor: \t 0\n", ""), GPUInfo{}, `no "Device Minor" line`},
		{"no uuid", replace("GPU UUID: \t GPU-3ea6ea3c-4e6b-7e2f-a1e6-5cd1b5a3f0d2\n", ""), GPUInfo{}, `no "GPU UUID" line`},
		{"bad minor", replace("Device Minor: \t 0", "Device Minor: \t x1"), GPUInfo{}, `line 9: Device Minor "x1": want a decimal number`},
		{"negative minor", replace("Device Minor: \t 0", "Device Minor: \t -1"), GPUInfo{}, `Device Minor "-1"`},
		{"huge minor", replace("Device Minor: \t 0", "Device Minor: \t 99999999999"), GPUInfo{}, `Device Minor "99999999999"`},
		{"bad irq", replace("IRQ:   \t\t 34", "IRQ: n/a"), GPUInfo{}, `line 2: IRQ "n/a"`},
		{"bad uuid", replace("GPU-3ea6ea3c-4e6b-7e2f-a1e6-5cd1b5a3f0d2", "GPU-3ea6ea3c"), GPUInfo{}, `line 3: GPU UUID "GPU-3ea6ea3c": not a GPU UUID`},
		{"bad bus", replace("0000:41:00.0", "0000:41:00"), GPUInfo{}, `line 8: Bus Location "0000:41:00": PCI bus id "0000:41:00": no .function`},
		{"bad excluded", replace("GPU Excluded:\t No", "GPU Excluded:\t maybe"), GPUInfo{}, `line 11: GPU Excluded "maybe": want Yes or No`},
		{"no colon", h100Information + "garbage\n", GPUInfo{}, `line 12: "garbage" is not a "Key: value" line`},
		{"duplicate", h100Information + "Device Minor: 1\n", GPUInfo{}, `line 12: duplicate "Device Minor"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGPUInformation([]byte(tc.in))
			checkErr(t, err, tc.err)
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestNormalizeBusID(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"0000:41:00.0", "00000000:41:00.0", ""},
		{"41:00.0", "00000000:41:00.0", ""},
		{"00000000:41:00.0", "00000000:41:00.0", ""},
		{"0000:C1:1F.7", "00000000:c1:1f.7", ""},
		{"cfdd:00:00.0", "0000cfdd:00:00.0", ""},
		{"10000:01:00.1", "00010000:01:00.1", ""},
		{"0:1:2.3", "00000000:01:02.3", ""},
		{"", "", "no .function"},
		{"junk", "", "no .function"},
		{"41:00", "", "no .function"},
		{"41.0", "", "want [domain:]bus:device.function"},
		{"0:0:41:00.0", "", "want [domain:]bus:device.function"},
		{"000000000:41:00.0", "", `domain "000000000": want 1 to 8 hex digits`},
		{"0000:141:00.0", "", `bus "141"`},
		{"0000:41:20.0", "", `device "20": over 0x1f`},
		{"0000:41:00.8", "", `function "8": over 0x7`},
		{"0000:41:00.00", "", `function "00": want 1 to 1 hex digits`},
		{"0000:4g:00.0", "", `bus "4g": not hexadecimal`},
		{"0000::00.0", "", `bus "": want 1 to 2`},
		{" 0000:41:00.0", "", `domain " 0000"`},
		{"+0:41:00.0", "", `domain "+0": not hexadecimal`},
		{"0000:41:00.0.0", "", `function "0.0"`},
	} {
		got, err := NormalizeBusID(tc.in)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("NormalizeBusID(%q) error %v, want %q", tc.in, err, tc.err)
		}
		if got != tc.want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseParams(t *testing.T) {
	ps, err := ParseParams([]byte(params))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 9 || ps[2] != (Param{"ModifyDeviceFiles", "1"}) || ps[6] != (Param{"RegistryDwords", `""`}) {
		t.Errorf("got %q", ps)
	}
	if v, ok := ps.Get(ParamImexChannelCount); !ok || v != "2048" {
		t.Errorf("Get(ImexChannelCount) = %q %v", v, ok)
	}
	if n, ok, err := ps.Uint(ParamDeviceFileMode); n != 438 || !ok || err != nil {
		t.Errorf("Uint(DeviceFileMode) = %d %v %v", n, ok, err)
	}
	if _, ok, err := ps.Uint("Nope"); ok || err != nil {
		t.Errorf("Uint(Nope) = %v %v", ok, err)
	}
	if _, _, err := ps.Uint("RegistryDwords"); err == nil || !strings.Contains(err.Error(), "RegistryDwords") {
		t.Errorf("Uint(RegistryDwords) err = %v", err)
	}
	for _, tc := range []struct{ in, err string }{
		{"", ""},
		{"\n\n", ""},
		{"A: 1\nnot a param\n", `line 2: "not a param"`},
		{": 1\n", `line 1: ": 1"`},
		{"Two words: 1\n", `line 1: "Two words: 1"`},
	} {
		_, err := ParseParams([]byte(tc.in))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseParams(%q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestDisableDeviceFileModification(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{params, strings.Replace(params, "ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0", 1)},
		{"ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0"},
		{"ModifyDeviceFiles:\t1\r\n", "ModifyDeviceFiles:\t0\r\n"},
		{"ModifyDeviceFiles: 0\n", "ModifyDeviceFiles: 0\n"},
		{"ModifyDeviceFiles: 11\n", "ModifyDeviceFiles: 11\n"},
		{"XModifyDeviceFiles: 1\nModifyDeviceFilesX: 1\n", "XModifyDeviceFiles: 1\nModifyDeviceFilesX: 1\n"},
		{"A: 1\nModifyDeviceFiles: 1\nB: 1\n", "A: 1\nModifyDeviceFiles: 0\nB: 1\n"},
		{"", ""},
	} {
		in := []byte(tc.in)
		got := DisableDeviceFileModification(in)
		if string(got) != tc.want {
			t.Errorf("DisableDeviceFileModification(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if string(in) != tc.in {
			t.Errorf("input modified: %q", in)
		}
		if got == nil {
			t.Errorf("nil result for %q", tc.in)
		}
	}
}

func TestParseDevices(t *testing.T) {
	d, err := ParseDevices([]byte(procDevices))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		major uint32
		ok    bool
	}{
		{DevNVIDIA, 195, true}, {DevNVIDIAUVM, 238, true}, {DevNVIDIANVSwitch, 239, true}, {DevNVIDIANVLink, 240, true},
		{DevNVIDIACaps, 241, true}, {DevNVIDIACapsIMEX, 242, true}, {"tty", 4, true}, {"/dev/vc/0", 4, true},
		{DevNVIDIAFrontend, 0, false}, {"loop", 0, false},
	} {
		if m, ok := d.CharMajor(tc.name); m != tc.major || ok != tc.ok {
			t.Errorf("CharMajor(%q) = %d %v, want %d %v", tc.name, m, ok, tc.major, tc.ok)
		}
	}
	if m, ok := d.GPUMajor(); m != 195 || !ok {
		t.Errorf("GPUMajor = %d %v", m, ok)
	}
	if m, ok := lookupMajor(d.Block, "sd"); m != 8 || !ok || len(d.Block) != 4 {
		t.Errorf("block major of sd = %d %v; block %v", m, ok, d.Block)
	}
	old, err := ParseDevices([]byte("Character devices:\n195 nvidia-frontend\n195 nvidia\n"))
	if m, ok := old.GPUMajor(); err != nil || m != 195 || !ok {
		t.Errorf("old driver GPUMajor = %d %v %v", m, ok, err)
	}
	for _, tc := range []struct{ in, err string }{
		{"", `no "Character devices:" section`},
		{"195 nvidia\n", `line 1: "195 nvidia" before "Character devices:"`},
		{"Character devices:\nnvidia 195\n", `line 2: "nvidia 195": major "nvidia"`},
		{"Character devices:\n195\n", `line 2: "195": want "<major> <name>"`},
		{"Character devices:\n4096 big\n", `major "4096" is not a number in [0,4095]`},
		{"Character devices:\n-1 neg\n", `major "-1"`},
		{"Character devices:\nBlock devices:\nBlock devices:\n", `line 3: second "Block devices:"`},
		{"Block devices:\nCharacter devices:\n", `line 2: "Character devices:" after another section`},
	} {
		_, err := ParseDevices([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseDevices(%q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestParseMIGMinors(t *testing.T) {
	m, err := ParseMIGMinors([]byte("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{"config": 1, "monitor": 2, MIGGIKey(0, 1): 12, MIGCIKey(0, 1, 0): 13}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got %v want %v", m, want)
	}
	for _, tc := range []struct{ in, err string }{
		{"config\n", `line 1: "config": want "<name> <minor>"`},
		{"config 1 2\n", `line 1: "config 1 2"`},
		{"config x\n", `line 1: config: minor "x"`},
		{"config 1048576\n", `minor "1048576" is not a number in [0,1048575]`},
		{"config 1\nconfig 2\n", `line 2: duplicate name "config"`},
	} {
		_, err := ParseMIGMinors([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseMIGMinors(%q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestParseCapAccess(t *testing.T) {
	c, err := ParseCapAccessFile([]byte("DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n"))
	if err != nil || c != (CapAccess{Minor: 12, Mode: 0o444, Modify: true}) {
		t.Fatalf("got %+v %v", c, err)
	}
	if m, err := ParseCapAccess([]byte("DeviceFileMinor: 2\nDeviceFileModify: 0\n")); m != 2 || err != nil {
		t.Errorf("ParseCapAccess = %d %v", m, err)
	}
	for _, tc := range []struct{ in, err string }{
		{"", `no "DeviceFileMinor" line`},
		{"DeviceFileMode: 292\n", `no "DeviceFileMinor" line`},
		{"DeviceFileMinor: x\n", `line 1: DeviceFileMinor "x"`},
		{"DeviceFileMinor: 1\nDeviceFileMode: 9999\n", `line 2: DeviceFileMode "9999"`},
		{"DeviceFileMinor: 1\nDeviceFileModify: 2\n", `DeviceFileModify "2"`},
		{"DeviceFileMinor: 1\nDeviceFileMinor: 2\n", `line 2: duplicate "DeviceFileMinor"`},
		{"DeviceFileMinor 1\n", `line 1: "DeviceFileMinor 1" is not`},
	} {
		_, err := ParseCapAccess([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseCapAccess(%q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestReadHelpers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if v, err := ReadVersion(write("version", versionOpen)); err != nil || v.NVRM != "580.159.04" {
		t.Errorf("ReadVersion = %+v %v", v, err)
	}
	bad := write("bad", "junk\n")
	if _, err := ReadGPUInformation(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": line 1:") {
		t.Errorf("ReadGPUInformation(bad) err = %v", err)
	}
	if _, err := ReadDevices(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadDevices(missing) err = %v", err)
	}
	big := write("big", strings.Repeat("x", maxProcFileBytes+1))
	if _, err := ReadParams(big); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), big) {
		t.Errorf("ReadParams(big) err = %v", err)
	}
	if m, err := ReadMIGMinors(write("mig", "config 1\n")); err != nil || m["config"] != 1 {
		t.Errorf("ReadMIGMinors = %v %v", m, err)
	}
	if _, err := ReadFile(dir); err == nil {
		t.Error("ReadFile(directory) succeeded")
	}
}

func TestHostProcDevices(t *testing.T) {
	data, err := ReadFile(DevicesPath)
	if err != nil {
		t.Skipf("no %s: %v", DevicesPath, err)
	}
	d, err := ParseDevices(data)
	if err != nil {
		t.Fatalf("host %s: %v\n%s", DevicesPath, err, data)
	}
	if m, ok := d.CharMajor("mem"); !ok || m != 1 {
		t.Errorf("host /proc/devices: mem major %d %v", m, ok)
	}
}

func TestParseMIGMinorsBlanks(t *testing.T) {
	m, err := ParseMIGMinors([]byte("  config\t1\r\nmonitor   2  \n"))
	if err != nil || len(m) != 2 || m["config"] != 1 || m["monitor"] != 2 {
		t.Fatalf("got %v %v", m, err)
	}
}
