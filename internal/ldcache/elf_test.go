package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestInspectMachines gives a host library the e_machine of each
// architecture and checks the cache flags ldconfig would record for it.
func TestInspectMachines(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libz.so.1"
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Skipf("no x86-64 library to patch: %v", err)
	}
	want, err := Inspect(bytes.NewReader(data), int64(len(data)))
	if err != nil || want.SONAME == "" {
		t.Fatalf("Inspect %s: %+v, %v", lib, want, err)
	}
	tests := []struct {
		name    string
		machine uint16
		flags   int32 // 0: not a library
	}{
		{"x86-64", 62, FlagELFLibc6 | ArchX8664},
		{"aarch64", 183, FlagELFLibc6 | ArchAArch64},
		{"ppc64le", 21, FlagELFLibc6 | ArchPPC64},
		{"sparcv9", 43, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := bytes.Clone(data)
			binary.LittleEndian.PutUint16(d[18:], tt.machine)
			got, err := Inspect(bytes.NewReader(d), int64(len(d)))
			if tt.flags == 0 {
				if !errors.Is(err, ErrNotLibrary) {
					t.Fatalf("Inspect = %+v, %v; want ErrNotLibrary", got, err)
				}
				return
			}
			if err != nil || got.Flags != tt.flags || got.SONAME != want.SONAME {
				t.Fatalf("Inspect = {%q %#x}, %v; want {%q %#x}", got.SONAME, got.Flags, err, want.SONAME, tt.flags)
			}
		})
	}
}

// TestInspectISALevel: an x86-64 object marked as needing more than the
// baseline ISA (ld -z x86-64-v3) is AboveBaseline; one marked baseline or
// unmarked is not.
func TestInspectISALevel(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc to build marked objects: %v", err)
	}
	src := filepath.Join(t.TempDir(), "f.c")
	if err := os.WriteFile(src, []byte("int f(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		above bool
	}{
		{"unmarked", nil, false},
		{"baseline", []string{"-Wl,-z,x86-64-baseline"}, false},
		{"v2", []string{"-Wl,-z,x86-64-v2"}, true},
		{"v3", []string{"-Wl,-z,x86-64-v3"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "libf.so.1")
			args := append([]string{"-shared", "-nostdlib", "-o", out, "-Wl,-soname,libf.so.1", src}, tc.flags...)
			if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
				t.Skipf("gcc %q: %v\n%s (a linker without x86 ISA markers)", args, err, b)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			lib, err := Inspect(bytes.NewReader(data), int64(len(data)))
			if err != nil || lib.SONAME != "libf.so.1" || lib.AboveBaseline != tc.above {
				t.Fatalf("Inspect = %+v, %v; want AboveBaseline %v", lib, err, tc.above)
			}
		})
	}
}
