package buildid

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadSelf: the test binary's build ID as `go tool buildid` prints it.
func TestReadSelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Skipf("go tool buildid %s: %v (Go's tool is needed to compare)", exe, err)
	}
	want := strings.TrimSpace(string(out))
	got, err := Read(exe)
	if err != nil || got != want {
		t.Fatalf("Read(%s) = %q, %v; want %q", exe, got, err, want)
	}
}

func TestReadNone(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"empty":   nil,
		"script":  []byte("#!/bin/sh\nexit 0\n"),
		"elf32":   append([]byte("\x7fELF\x01\x01\x01"), make([]byte, 60)...),
		"no note": elf64(nil),
		"other":   elf64(note("GNU\x00", 3, []byte("abcd"))),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		if id, err := Read(p); !errors.Is(err, ErrNone) {
			t.Errorf("%s: %q, %v; want ErrNone", name, id, err)
		}
	}
	p := filepath.Join(dir, "go")
	if err := os.WriteFile(p, elf64(append(note("GNU\x00", 3, []byte("abcd")), note("Go\x00\x00", 4, []byte("a/b/c/d"))...)), 0o755); err != nil {
		t.Fatal(err)
	}
	if id, err := Read(p); err != nil || id != "a/b/c/d" {
		t.Errorf("synthetic: %q, %v", id, err)
	}
	if _, err := Read(filepath.Join(dir, "missing")); err == nil || errors.Is(err, ErrNone) {
		t.Errorf("missing file: %v", err)
	}
	// A FIFO is refused at once, not waited on.
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(fifo); err == nil {
		t.Error("a FIFO was read")
	}
}

// note encodes one ELF note.
func note(name string, typ uint32, desc []byte) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, uint32(len(name)))
	b = le.AppendUint32(b, uint32(len(desc)))
	b = le.AppendUint32(b, typ)
	b = append(b, name...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// elf64 is a minimal little-endian ELF64 file with one program header, a
// PT_NOTE over notes (none: a PT_LOAD).
func elf64(notes []byte) []byte {
	le := binary.LittleEndian
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	le.PutUint16(h[16:], 2)
	le.PutUint64(h[32:], 64)
	le.PutUint16(h[54:], 56)
	le.PutUint16(h[56:], 1)
	ph := make([]byte, 56)
	typ := uint32(1)
	if notes != nil {
		typ = 4 // PT_NOTE
	}
	le.PutUint32(ph, typ)
	le.PutUint64(ph[8:], 120)
	le.PutUint64(ph[32:], uint64(len(notes)))
	return append(append(h, ph...), notes...)
}

// FuzzParse: no input makes Parse panic or read without bounds; an ID it
// finds is in the input.
func FuzzParse(f *testing.F) {
	f.Add(elf64(note("Go\x00\x00", 4, []byte("x/y"))))
	f.Add(elf64(note("GNU\x00", 3, []byte("abcd"))))
	f.Add(elf64(nil))
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := Parse(bytes.NewReader(data), int64(len(data)))
		if err == nil && !bytes.Contains(data, []byte(id)) {
			t.Fatalf("ID %q not in the input", id)
		}
	})
}
