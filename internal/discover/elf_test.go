package discover

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/nctk/nctk/internal/ldcache"
)

// sonameFrom is the SONAME that discovery reads (ldcache.Inspect) of an
// in-memory object.
func sonameFrom(data []byte) (string, error) {
	lib, err := ldcache.Inspect(bytes.NewReader(data), int64(len(data)))
	return lib.SONAME, err
}

// sonameDebugELF is the reference: the standard library's ELF reader.
func sonameDebugELF(path string) (string, bool) {
	f, err := elf.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return "", false
	}
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil {
		return "", false
	}
	if len(names) == 0 {
		return "", true
	}
	return names[0], true
}

// TestReadSONAMEMatchesDebugELF compares the lean reader with debug/elf on
// every shared object of the host's library directories (64- and, where
// installed, 32-bit).
func TestReadSONAMEMatchesDebugELF(t *testing.T) {
	var files []string
	for _, g := range []string{"/usr/lib/x86_64-linux-gnu/*.so*", "/usr/lib/i386-linux-gnu/*.so*", "/usr/lib/aarch64-linux-gnu/*.so*", "/lib64/*.so*"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("no shared objects found in the host's library directories")
	}
	checked := 0
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		want, ok := sonameDebugELF(f)
		if !ok {
			continue
		}
		got, err := readSONAME(hostLoc(f), nil)
		if err != nil {
			t.Errorf("%s: %v (debug/elf says %q)", f, err, want)
			continue
		}
		if got != want {
			t.Errorf("%s: SONAME %q, debug/elf says %q", f, got, want)
		}
		checked++
	}
	t.Logf("compared %d shared objects", checked)
}

func TestReadSONAMETestdata(t *testing.T) {
	for file, want := range map[string]string{
		"testdata/libsoname64.so": "libnctktest.so.1",
		"testdata/libsoname32.so": "libnctktest.so.1",
		"testdata/libnosoname.so": "",
	} {
		got, err := readSONAME(hostLoc(file), nil)
		if err != nil || got != want {
			t.Errorf("readSONAME(%s) = %q, %v; want %q", file, got, err, want)
		}
		if ref, ok := sonameDebugELF(file); !ok || ref != want {
			t.Errorf("debug/elf disagrees on %s: %q", file, ref)
		}
	}
	if _, err := readSONAME(hostLoc("testdata/missing.so"), nil); err == nil {
		t.Error("no error for a missing file")
	}
}

// TestReadABITag compares the ABI note reader with debug/elf's view of the
// .note.ABI-tag section of the host's libraries.
func TestReadABITag(t *testing.T) {
	files, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/lib*.so.*")
	checked := 0
	for _, f := range files {
		ef, err := elf.Open(f)
		if err != nil {
			continue
		}
		want := uint32(0)
		if sec := ef.Section(".note.ABI-tag"); sec != nil {
			if d, err := sec.Data(); err == nil && len(d) >= 32 && ef.ByteOrder.Uint32(d[16:]) == 0 {
				bo := ef.ByteOrder
				want = bo.Uint32(d[20:])<<16 | bo.Uint32(d[24:])<<8 | bo.Uint32(d[28:])
			}
		}
		typ := ef.Type
		ef.Close()
		if typ != elf.ET_DYN {
			continue
		}
		got, err := readABITag(hostLoc(f), nil)
		if err != nil || got != want {
			t.Errorf("%s: ABI tag %#x, %v; debug/elf says %#x", f, got, err, want)
		}
		checked++
	}
	t.Logf("compared %d shared objects", checked)
	if v, err := readABITag(hostLoc("testdata/libsoname64.so"), nil); err != nil || v != 0 {
		t.Errorf("object without a note: %#x, %v", v, err)
	}
}

func TestReadSONAMEErrors(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exeData, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string][]byte{
		"empty":      {},
		"text":       []byte("#!/bin/sh\necho hi\n"),
		"bad class":  append([]byte("\x7fELF\x09\x01\x01"), make([]byte, 80)...),
		"truncated":  []byte("\x7fELF\x02\x01\x01\x00"),
		"executable": exeData, // a Go test binary is ET_EXEC (or ET_DYN when PIE: then it has no SONAME)
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := sonameFrom(data)
			if name == "executable" {
				if err == nil && got != "" {
					t.Errorf("executable has SONAME %q", got)
				}
				return
			}
			if err == nil {
				t.Errorf("no error, SONAME %q", got)
			}
		})
	}
}

// FuzzSONAME feeds arbitrary bytes (seeded with a real shared object and
// mutilated headers) to the SONAME reader: it must return, never panic or
// allocate without bound.
func FuzzSONAME(f *testing.F) {
	for _, g := range []string{"testdata/libsoname64.so", "testdata/libsoname32.so", "testdata/libnosoname.so"} {
		data, err := os.ReadFile(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Add([]byte("\x7fELF\x01\x02\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := sonameFrom(data)
		if err == nil && len(s) > 4096 {
			t.Fatalf("SONAME of %d bytes", len(s))
		}
		if v, err := ldcache.ABITag(bytes.NewReader(data), int64(len(data))); err == nil && v > 0xffffff {
			t.Fatalf("ABI tag %#x out of range", v)
		}
	})
}
