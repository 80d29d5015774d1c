package doctor

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"reflect"
	"testing"
)

// makeFatbin encodes one fat binary container holding entries (each with
// a 64-byte header and a 16-byte payload), as nvcc lays them out.
func makeFatbin(entries ...FatbinEntry) []byte {
	le := binary.LittleEndian
	var body []byte
	for _, e := range entries {
		h := make([]byte, 64)
		kind := uint16(fatbinKindSASS)
		if e.PTX {
			kind = fatbinKindPTX
		}
		le.PutUint16(h[0:], kind)
		le.PutUint16(h[2:], 0x0101)
		le.PutUint32(h[4:], 64)
		le.PutUint64(h[8:], 16)
		le.PutUint16(h[24:], 3)
		le.PutUint16(h[26:], 8)
		le.PutUint32(h[28:], uint32(e.Arch))
		body = append(body, h...)
		body = append(body, bytes.Repeat([]byte{0xab}, 16)...)
	}
	hdr := make([]byte, fatbinHeaderSize)
	le.PutUint32(hdr[0:], fatbinMagic)
	le.PutUint16(hdr[4:], 1)
	le.PutUint16(hdr[6:], fatbinHeaderSize)
	le.PutUint64(hdr[8:], uint64(len(body)))
	return append(hdr, body...)
}

// makeELF writes a minimal x86-64 ELF file whose .nv_fatbin section holds
// fatbin (an empty section when fatbin is nil).
func makeELF(t *testing.T, p string, fatbin []byte) {
	t.Helper()
	if err := os.WriteFile(p, elfBytes(t, fatbin), 0o755); err != nil {
		t.Fatal(err)
	}
}

// elfBytes encodes the ELF file makeELF writes.
func elfBytes(t *testing.T, fatbin []byte) []byte {
	t.Helper()
	le := binary.LittleEndian
	shstr := []byte("\x00.nv_fatbin\x00.shstrtab\x00")
	dataOff := uint64(64)
	strOff := dataOff + uint64(len(fatbin))
	shOff := strOff + uint64(len(shstr))
	shOff = (shOff + 7) &^ 7
	var buf bytes.Buffer
	hdr := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Shoff: shOff, Ehsize: 64, Shentsize: 64, Shnum: 3, Shstrndx: 2}
	copy(hdr.Ident[:], []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	fatType := elf.SHT_PROGBITS
	if fatbin == nil {
		fatType = elf.SHT_NULL
	}
	sections := []elf.Section64{
		{},
		{Name: 1, Type: uint32(fatType), Off: dataOff, Size: uint64(len(fatbin)), Addralign: 8},
		{Name: 12, Type: uint32(elf.SHT_STRTAB), Off: strOff, Size: uint64(len(shstr)), Addralign: 1},
	}
	if err := binary.Write(&buf, le, hdr); err != nil {
		t.Fatal(err)
	}
	buf.Write(fatbin)
	buf.Write(shstr)
	buf.Write(make([]byte, int(shOff)-buf.Len()))
	for _, s := range sections {
		if err := binary.Write(&buf, le, s); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestParseFatbin(t *testing.T) {
	two := append(makeFatbin(FatbinEntry{Arch: 70}, FatbinEntry{Arch: 80}), 0, 0, 0, 0, 0, 0, 0, 0)
	two = append(two, makeFatbin(FatbinEntry{PTX: true, Arch: 80})...)
	bad := makeFatbin(FatbinEntry{Arch: 90})
	binary.LittleEndian.PutUint64(bad[8:], 1<<40)
	for _, tc := range []struct {
		name    string
		data    []byte
		want    []FatbinEntry
		wantErr bool
	}{
		{"empty", nil, nil, false},
		{"one container", makeFatbin(FatbinEntry{Arch: 90}, FatbinEntry{PTX: true, Arch: 90}), []FatbinEntry{{Arch: 90}, {PTX: true, Arch: 90}}, false},
		{"two containers with padding", two, []FatbinEntry{{Arch: 70}, {Arch: 80}, {PTX: true, Arch: 80}}, false},
		{"bad magic", []byte("not a fatbin at all"), nil, true},
		{"payload past the end", bad, nil, true},
		{"truncated entry", makeFatbin(FatbinEntry{Arch: 80})[:40], nil, true},
		{"trailing garbage", append(makeFatbin(FatbinEntry{Arch: 80}), 1, 2), []FatbinEntry{{Arch: 80}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFatbin(bytes.NewReader(tc.data), int64(len(tc.data)))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("entries %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRunsOn(t *testing.T) {
	sass := func(a ...int) []FatbinEntry {
		var out []FatbinEntry
		for _, x := range a {
			out = append(out, FatbinEntry{Arch: x})
		}
		return out
	}
	for _, tc := range []struct {
		entries []FatbinEntry
		cc      string
		want    bool
	}{
		{sass(80), "8.0", true},
		{sass(80), "8.6", true},  // same major, higher minor
		{sass(86), "8.0", false}, // same major, lower minor
		{sass(70, 80), "9.0", false},
		{append(sass(70), FatbinEntry{PTX: true, Arch: 80}), "9.0", true}, // PTX JIT
		{[]FatbinEntry{{PTX: true, Arch: 90}}, "8.0", false},
		{sass(90), "9.0", true},
		{nil, "9.0", false},
	} {
		got, err := runsOn(tc.entries, tc.cc)
		if err != nil || got != tc.want {
			t.Errorf("runsOn(%s, %s) = %v, %v; want %v", archList(tc.entries), tc.cc, got, err, tc.want)
		}
	}
	if _, err := runsOn(sass(80), "nine"); err == nil {
		t.Error("bad compute capability accepted")
	}
}

func TestELFFatbin(t *testing.T) {
	dir := t.TempDir()
	makeELF(t, dir+"/a", makeFatbin(FatbinEntry{Arch: 80}))
	got, err := fileFatbin(rootfsFiles{dir}, "/a")
	if err != nil || !reflect.DeepEqual(got, []FatbinEntry{{Arch: 80}}) {
		t.Fatalf("fileFatbin = %v, %v", got, err)
	}
	makeELF(t, dir+"/b", nil)
	if _, err := fileFatbin(rootfsFiles{dir}, "/b"); err != errNoFatbin {
		t.Fatalf("no section: err = %v", err)
	}
	if err := os.WriteFile(dir+"/c", []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := fileFatbin(rootfsFiles{dir}, "/c"); err != errNoFatbin {
		t.Fatalf("script: err = %v", err)
	}
}

func FuzzParseFatbin(f *testing.F) {
	f.Add(makeFatbin(FatbinEntry{Arch: 80}, FatbinEntry{PTX: true, Arch: 90}))
	f.Add(append(makeFatbin(FatbinEntry{Arch: 70}), 0, 0, 0, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseFatbin(bytes.NewReader(data), int64(len(data)))
		if len(entries) > len(data)/fatbinEntryMinHeader {
			t.Fatalf("%d entries from %d bytes (err %v)", len(entries), len(data), err)
		}
	})
}
