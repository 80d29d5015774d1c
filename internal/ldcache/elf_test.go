package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
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
