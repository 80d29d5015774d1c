package ldcache

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/nctk/nctk/internal/cudacompat/compattest"
)

// sectionSeeds are ELF objects with section headers: a note in a minimal
// object (compattest), real 32- and 64-bit shared objects.
func sectionSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	seeds := map[string][]byte{
		"note":       compattest.NoteELF(".note.cuda.fwd_compatibility", "NVIDIA Corporation", `{"CUDA Version":"13.0"}`, 8),
		"no section": compattest.NoteELF("", "", "", 4),
	}
	for _, name := range []string{"libsoname32.so", "libsoname64.so"} {
		data, err := os.ReadFile("../discover/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		seeds[name] = data
	}
	return seeds
}

// TestFindSection: every section of the seeds is found where debug/elf
// finds it (debug/elf is the oracle; the binaries do not link it); a
// missing name is not found; a broken table is an error.
func TestFindSection(t *testing.T) {
	for name, data := range sectionSeeds(t) {
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, s := range f.Sections {
			if s.Name == "" {
				continue
			}
			got, found, err := FindSection(bytes.NewReader(data), int64(len(data)), s.Name)
			want := Section{Type: uint32(s.Type), Offset: s.Offset, Size: s.Size, Addralign: s.Addralign}
			if err != nil || !found || got != want {
				t.Errorf("%s: section %s: %+v, %v, %v; want %+v", name, s.Name, got, found, err, want)
			}
		}
		if _, found, err := FindSection(bytes.NewReader(data), int64(len(data)), ".no.such.section"); found || err != nil {
			t.Errorf("%s: a missing section: found %v, %v", name, found, err)
		}
	}
	note := sectionSeeds(t)["note"]
	le := binary.LittleEndian
	// Extended numbering: the count in section 0's sh_size, the name
	// table's index in its sh_link — refused, as by debug/elf, when the
	// header's 16 bits could have held them.
	shoff := le.Uint64(note[40:])
	for _, tc := range []struct {
		name  string
		patch func(b []byte)
	}{
		{"a small count in section 0", func(b []byte) { le.PutUint16(b[60:], 0); le.PutUint64(b[shoff+32:], 3) }},
		{"a small name table index in section 0", func(b []byte) {
			le.PutUint16(b[60:], 0)
			le.PutUint64(b[shoff+32:], 0xff00)
			le.PutUint16(b[62:], 0xffff)
			le.PutUint32(b[shoff+40:], 1)
		}},
		{"a name table index beyond the count", func(b []byte) { le.PutUint16(b[62:], 0xffff) }},
	} {
		b := bytes.Clone(note)
		tc.patch(b)
		if _, err := elf.NewFile(bytes.NewReader(b)); err == nil {
			t.Fatalf("%s: debug/elf reads it", tc.name)
		}
		if _, found, err := FindSection(bytes.NewReader(b), int64(len(b)), ".note.cuda.fwd_compatibility"); err == nil || found {
			t.Errorf("%s: found %v, err %v; want an error", tc.name, found, err)
		}
	}
	for _, tc := range []struct {
		name  string
		patch func(b []byte) []byte
		err   bool
	}{
		{"no section table", func(b []byte) []byte { le.PutUint64(b[40:], 0); return b }, false},
		{"string table index out of range", func(b []byte) []byte { le.PutUint16(b[62:], 9); return b }, true},
		{"table beyond the file", func(b []byte) []byte { le.PutUint64(b[40:], uint64(len(b))); return b }, true},
		{"entries too small", func(b []byte) []byte { le.PutUint16(b[58:], 40); return b }, true},
		{"big-endian", func(b []byte) []byte { b[5] = 2; return b }, true},
		{"not ELF", func(b []byte) []byte { return []byte("#!/bin/sh\n" + string(b[10:])) }, true},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.patch(bytes.Clone(note))
			_, found, err := FindSection(bytes.NewReader(b), int64(len(b)), ".note.cuda.fwd_compatibility")
			if (err != nil) != tc.err || found {
				t.Errorf("found %v, err %v; want error %v", found, err, tc.err)
			}
			if err != nil && tc.name != "truncated" && !errors.Is(err, ErrNotLibrary) {
				t.Errorf("err %v: want ErrNotLibrary", err)
			}
		})
	}
}

// FuzzFindSection: where debug/elf reads a little-endian object's section
// headers, FindSection finds a named section exactly when and where
// debug/elf does (fuzz inputs stay far below its size bounds).
func FuzzFindSection(f *testing.F) {
	for _, data := range sectionSeeds(f) {
		f.Add(data, ".note.cuda.fwd_compatibility")
		f.Add(data, ".dynsym")
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		got, found, err := FindSection(bytes.NewReader(data), int64(len(data)), name)
		if err != nil && found {
			t.Fatal("found with an error")
		}
		ef, eerr := elf.NewFile(bytes.NewReader(data))
		if eerr != nil || ef.ByteOrder != binary.LittleEndian || name == "" {
			return
		}
		s := ef.Section(name)
		if s == nil {
			if found {
				t.Fatalf("section %q found where debug/elf has none: %+v", name, got)
			}
			return
		}
		want := Section{Type: uint32(s.Type), Offset: s.Offset, Size: s.Size, Addralign: s.Addralign}
		if err != nil || !found || got != want {
			t.Fatalf("section %q: %+v (found %v, %v), debug/elf %+v", name, got, found, err, want)
		}
	})
}
