package cudacompat

import (
	"bytes"
	"log/slog"
	"os"
	"slices"
	"testing"

	"github.com/nctk/nctk/internal/cudacompat/compattest"
	"github.com/nctk/nctk/internal/rootfs"
)

const fwdNote = `{"Format":1,"CUDA Version":"13.0","Driver":[535,550,570,580],"Device":[]}`

func TestReadCompatNote(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want *compatInfo
		err  bool
	}{
		{"note aligned 4", compattest.NoteELF(compatNote, compatNoteOwner, fwdNote, 4), &compatInfo{CUDAVersion: "13.0", Driver: []int{535, 550, 570, 580}}, false},
		{"note aligned 8", compattest.NoteELF(compatNote, compatNoteOwner, fwdNote, 8), &compatInfo{CUDAVersion: "13.0", Driver: []int{535, 550, 570, 580}}, false},
		{"other owner", compattest.NoteELF(compatNote, "Someone Else", fwdNote, 4), nil, false},
		{"other section", compattest.NoteELF(".note.other", compatNoteOwner, fwdNote, 4), nil, false},
		{"no note", compattest.NoteELF("", "", "", 4), nil, false},
		{"bad JSON", compattest.NoteELF(compatNote, compatNoteOwner, `{"CUDA Version":`, 4), nil, true},
		{"not ELF", []byte("#!/bin/sh\n"), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readCompatNote(bytes.NewReader(tc.data), int64(len(tc.data)))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if tc.want == nil && got != nil || tc.want != nil && (got == nil || got.CUDAVersion != tc.want.CUDAVersion || !slices.Equal(got.Driver, tc.want.Driver)) {
				t.Errorf("note = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestUseCompat(t *testing.T) {
	note := &compatInfo{CUDAVersion: "13.0", Driver: []int{535, 550, 570, 580}}
	tests := []struct {
		compat, driver, cuda string
		note                 *compatInfo
		want                 bool
	}{
		// With the note: the host branch must be listed and compat newer.
		{"590.44.01", "580.65.06", "", note, true},
		{"590.44.01", "535.261.03", "", note, true},
		{"590.44.01", "470.256.02", "", note, false},
		{"590.44.01", "600.1", "", note, false},
		{"580.65.06", "580.65.06", "", note, false},
		{"580.65.06", "580.65.10", "", note, false},
		{"580.65.10", "580.65.06", "", note, true},
		{"580.95.05", "580.159.04", "", note, false}, // numeric, not string, order
		// The note without a usable driver version: CUDA versions.
		{"590.44.01", "", "12.8", note, true},
		{"590.44.01", "", "13.0", note, false},
		{"590.44.01", "bogus", "12.2", note, true},
		{"590.44.01", "", "", note, false},
		{"590.44.01", "bogus", "", note, false},
		// Without the note: majors only, and never against a CUDA version.
		{"590.44.01", "580.65.06", "", nil, true},
		{"580.99.01", "580.65.06", "", nil, false},
		{"570.1", "580.65.06", "", nil, false},
		{"590.44.01", "580.65.06", "12.8", nil, false},
		{"590.44.01", "", "12.8", nil, false},
		{"x.y", "580.65.06", "", nil, false},
		{"590.44.01", "580", "", nil, true},
	}
	for _, tc := range tests {
		if got := useCompat(tc.compat, tc.driver, tc.cuda, tc.note, slog.New(slog.DiscardHandler)); got != tc.want {
			t.Errorf("useCompat(%q, driver %q, cuda %q, note %v) = %v, want %v", tc.compat, tc.driver, tc.cuda, tc.note != nil, got, tc.want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want dotted
		ok   bool
	}{
		{"580.159.04", dotted{580, 159, 4}, true},
		{"13.0", dotted{13, 0, 0}, true},
		{"580", dotted{580, 0, 0}, true},
		{"v12.4.1", dotted{12, 4, 1}, true},
		{"", dotted{}, false},
		{"1.2.3.4", dotted{}, false},
		{"1.2-rc1", dotted{}, false},
		{"1..2", dotted{}, false},
		{"-1.2", dotted{}, false},
		{"+1.2", dotted{}, false},
	}
	for _, tc := range tests {
		got, ok := parseVersion(tc.in)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("parseVersion(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzReadCompatNote: any file content is read without a panic, and a
// note is returned only with NVIDIA's owner.
func FuzzReadCompatNote(f *testing.F) {
	f.Add(compattest.NoteELF(compatNote, compatNoteOwner, fwdNote, 4))
	f.Add(compattest.NoteELF(compatNote, compatNoteOwner, fwdNote, 8))
	f.Add(compattest.NoteELF(compatNote, compatNoteOwner, `{"Driver":[1e9]}`, 4))
	f.Add(compattest.NoteELF("", "", "", 4))
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		readCompatNote(bytes.NewReader(data), int64(len(data)))
	})
}

// BenchmarkSelect is the cost the runtime adds to a create that asks for
// compute: Select on an image without a compat directory, and on one with
// a compat libcuda (readdir, open, ELF section headers).
func BenchmarkSelect(b *testing.B) {
	lib, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		b.Fatal(err)
	}
	for _, withCompat := range []bool{false, true} {
		name := "no compat dir"
		if withCompat {
			name = "compat lib"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			if withCompat {
				if err := os.MkdirAll(dir+"/usr/local/cuda/compat", 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(dir+"/usr/local/cuda/compat/libcuda.so.999.1.1", lib, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			r, err := rootfs.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			log := slog.New(slog.DiscardHandler)
			for b.Loop() {
				got, err := Select(r, "/usr/local/cuda/compat", "470.256.02", "", log)
				if err != nil || (got != "") != withCompat {
					b.Fatalf("Select = %q, %v", got, err)
				}
			}
		})
	}
}
