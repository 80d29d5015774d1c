package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/nctk/nctk/internal/hostfile"
)

// sample returns entries covering every class the package distinguishes.
func sample() []Entry {
	return []Entry{
		{Key: "libcuda.so.1", Value: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Flags: FlagELFLibc6 | ArchX8664},
		{Key: "libcuda.so", Value: "/usr/lib/x86_64-linux-gnu/libcuda.so", Flags: FlagELFLibc6 | ArchX8664, OSVersion: 0x030200},
		{Key: "libcuda.so.1", Value: "/usr/lib/i386-linux-gnu/libcuda.so.1", Flags: FlagELFLibc6 | ArchI386},
		{Key: "libnvidia-ml.so.1", Value: "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1", Flags: FlagELFLibc6 | ArchAArch64},
		{Key: "libnvidia-ml.so.1", Value: "/usr/lib/arm-linux-gnueabihf/libnvidia-ml.so.1", Flags: FlagELFLibc6 | ArchARMHF},
		{Key: "libnvidia-ml.so.1", Value: "/usr/lib/powerpc64le-linux-gnu/libnvidia-ml.so.1", Flags: FlagELFLibc6 | ArchPPC64},
		{Key: "libx32.so.1", Value: "/usr/libx32/libx32.so.1", Flags: FlagELFLibc6 | ArchX32},
		{Key: "libold.so.5", Value: "/lib/libold.so.5", Flags: FlagELFLibc5},
		{Key: "libelf1.so", Value: "/lib/libelf1.so", Flags: FlagELF},
		{Key: "libz.so.1", Value: "/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libz.so.1", Flags: FlagELFLibc6 | ArchX8664, HWCap: hwcapExtension | 1},
		{Key: "", Value: "", Flags: FlagELFLibc6 | ArchX8664},
	}
}

func TestBuildParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
		format  Format
	}{
		{"empty new", nil, FormatNew},
		{"empty compat", nil, FormatCompat},
		{"sample new", sample(), FormatNew},
		{"sample compat", sample(), FormatCompat},
		{"one compat (odd old size)", sample()[:1], FormatCompat},
		{"two compat", sample()[:2], FormatCompat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := BuildFormat(tc.entries, tc.format)
			for _, parse := range []struct {
				name string
				fn   func([]byte) (*Cache, error)
			}{{"Parse", Parse}, {"parseOwned", func(b []byte) (*Cache, error) { c, _, err := parseOwned(b, nil); return c, err }}} {
				c, err := parse.fn(bytes.Clone(data))
				if err != nil {
					t.Fatalf("%s: %v", parse.name, err)
				}
				if len(c.Entries) != len(tc.entries) || (len(tc.entries) > 0 && !slices.Equal(c.Entries, tc.entries)) {
					t.Errorf("%s: got %+v\nwant %+v", parse.name, c.Entries, tc.entries)
				}
			}
		})
	}
}

func TestParseOldOnlyUnsupported(t *testing.T) {
	for _, entries := range [][]Entry{nil, sample()} {
		_, err := Parse(BuildFormat(entries, FormatOld))
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("old-only cache (%d entries): err = %v, want %v", len(entries), err, ErrUnsupported)
		}
	}
}

func TestEntryClass(t *testing.T) {
	for _, tc := range []struct {
		flags int32
		elf   bool
		class Class
	}{
		{FlagELFLibc6 | ArchX8664, true, Class64},
		{FlagELFLibc6 | ArchAArch64, true, Class64},
		{FlagELFLibc6 | ArchPPC64, true, Class64},
		{FlagELFLibc6 | ArchI386, true, Class32},
		{FlagELFLibc6 | ArchARMHF, true, Class32},
		{FlagELF | ArchI386, true, Class32},
		{FlagELFLibc6 | ArchX32, true, ClassOther},
		{FlagELFLibc6 | ArchS390x, true, ClassOther},
		{FlagELFLibc6 | ArchRISCVDbl, true, ClassOther},
		{FlagELFLibc5, false, Class32},
		{0, false, Class32},
		{0x04 | ArchX8664, false, Class64},
		{-1, false, ClassOther},
	} {
		e := Entry{Flags: tc.flags}
		if e.IsELF() != tc.elf || e.Class() != tc.class {
			t.Errorf("flags %#x: IsELF %v Class %v, want %v %v", tc.flags, e.IsELF(), e.Class(), tc.elf, tc.class)
		}
	}
}

func TestLookup(t *testing.T) {
	c, err := Parse(Build(sample()))
	if err != nil {
		t.Fatal(err)
	}
	values := func(es []Entry) []string {
		var v []string
		for _, e := range es {
			v = append(v, e.Value)
		}
		return v
	}
	for _, tc := range []struct {
		class    Class
		prefixes []string
		want     []string
	}{
		{Class64, []string{"libcuda.so"}, []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"}},
		{Class32, []string{"libcuda.so"}, []string{"/usr/lib/i386-linux-gnu/libcuda.so.1"}},
		{Class64, []string{"libz", "libnvidia-ml.so"}, []string{
			"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
			"/usr/lib/powerpc64le-linux-gnu/libnvidia-ml.so.1",
			"/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libz.so.1",
		}},
		{Class32, []string{"libnvidia-ml"}, []string{"/usr/lib/arm-linux-gnueabihf/libnvidia-ml.so.1"}},
		{Class32, []string{"libold", "libelf1"}, []string{"/lib/libelf1.so"}}, // libc5 is not ELF for the loader
		{ClassOther, []string{"lib"}, []string{"/usr/libx32/libx32.so.1"}},
		{Class64, []string{"libnope"}, nil},
		{Class64, nil, []string{
			"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so",
			"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1", "/usr/lib/powerpc64le-linux-gnu/libnvidia-ml.so.1",
			"/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libz.so.1", "",
		}},
	} {
		if got := values(c.Lookup(tc.class, tc.prefixes...)); !slices.Equal(got, tc.want) {
			t.Errorf("Lookup(%v, %q) = %q, want %q", tc.class, tc.prefixes, got, tc.want)
		}
	}
}

// mutate returns a copy of data with fn applied.
func mutate(data []byte, fn func(b []byte) []byte) []byte { return fn(bytes.Clone(data)) }

func TestParseErrors(t *testing.T) {
	le := binary.LittleEndian
	good := Build(sample())
	compat := BuildFormat(sample(), FormatCompat)
	strStart := newHeaderSize + len(sample())*newEntrySize
	for _, tc := range []struct {
		name string
		data []byte
		want error
		msg  string // substring of the message
	}{
		{"empty", nil, ErrBadMagic, `file starts with ""`},
		{"garbage", []byte("\x7fELF\x02\x01\x01"), ErrBadMagic, "bad magic"},
		{"magic prefix only", []byte("glibc-ld.so.cache1.1"), ErrTruncated, "header at offset 0 needs 48 bytes, 20 left"},
		{"truncated header", good[:47], ErrTruncated, "needs 48 bytes, 47 left"},
		{"wrong version", mutate(good, func(b []byte) []byte { copy(b[17:], "1.2"); return b }), ErrUnsupported, `version "1.2"`},
		{"big endian flag", mutate(good, func(b []byte) []byte { b[flagsOffset] = 3; return b }), ErrUnsupported, "flags 0x03"},
		{"invalid endian flag", mutate(good, func(b []byte) []byte { b[flagsOffset] = 1; return b }), ErrUnsupported, "not a little-endian"},
		{"entry table beyond EOF", good[:newHeaderSize+newEntrySize*2], ErrTruncated, "entry table (11 entries)"},
		{"huge nlibs", mutate(good, func(b []byte) []byte { le.PutUint32(b[20:], 0xffffffff); return b }), ErrTruncated, "entry table (4294967295 entries)"},
		{"string table beyond EOF", good[:len(good)-1], ErrTruncated, "string table"},
		{"huge len_strings", mutate(good, func(b []byte) []byte { le.PutUint32(b[24:], 0xffffffff); return b }), ErrTruncated, "string table (4294967295 bytes"},
		{"key offset past table", mutate(good, func(b []byte) []byte { le.PutUint32(b[newHeaderSize+4:], uint32(len(b))); return b }), ErrOutOfRange, "entry 0: key offset"},
		{"key offset max", mutate(good, func(b []byte) []byte { le.PutUint32(b[newHeaderSize+4:], 0xffffffff); return b }), ErrOutOfRange, "key offset 4294967295"},
		{"key offset in header", mutate(good, func(b []byte) []byte { le.PutUint32(b[newHeaderSize+4:], 0); return b }), ErrOutOfRange, "entry 0: key offset 0"},
		{"value offset in entries", mutate(good, func(b []byte) []byte {
			le.PutUint32(b[newHeaderSize+newEntrySize+8:], uint32(strStart-1))
			return b
		}), ErrOutOfRange, "entry 1 (libcuda.so): value offset"},
		{"unterminated last string", mutate(good, func(b []byte) []byte { b[len(b)-1] = 'x'; return b }), ErrOutOfRange, "not NUL-terminated"},
		{"old truncated header", []byte("ld.so-1.7.0\x00\x01"), ErrTruncated, "old-format header needs 16 bytes, file has 13"},
		{"old entries beyond EOF", compat[:oldHeaderSize+oldEntrySize], ErrTruncated, "old-format entry table (11 entries)"},
		{"old huge count", mutate(compat, func(b []byte) []byte { le.PutUint32(b[12:], 0xffffffff); return b }), ErrTruncated, "old-format entry table (4294967295 entries)"},
		{"old only", BuildFormat(sample(), FormatOld), ErrUnsupported, "without a glibc-ld.so.cache section"},
		{"old then nothing", BuildFormat(nil, FormatOld), ErrUnsupported, "at offset 16"},
		{"compat new header truncated", compat[:oldHeaderSize+len(sample())*oldEntrySize+4+30], ErrTruncated, "header at offset 152 needs 48 bytes, 30 left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(tc.data)
			if err == nil {
				t.Fatalf("Parse succeeded with %d entries, want error %v", len(c.Entries), tc.want)
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %q, want %v containing %q", err, tc.want, tc.msg)
			}
			if _, _, err2 := parseOwned(bytes.Clone(tc.data), nil); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("parseOwned err = %v, Parse err = %v", err2, err)
			}
		})
	}
}

func TestLoadErrorsNamePath(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "etc", "ld.so.cache")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, Build(sample())[:30], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	want := "ld.so.cache " + p + ": truncated: "
	if !errors.Is(err, ErrTruncated) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %q, want prefix %q", err, want)
	}
	_, err = Load(filepath.Join(dir, "missing"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "missing")) {
		t.Fatalf("missing file: err = %v", err)
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("Load(directory) succeeded")
	}
}

// ldconfigPrint runs `ldconfig -p -C file` and returns one line per entry,
// "key\tvalue\tclass", in output order.
func ldconfigPrint(t *testing.T, ldconfig, file string) []string {
	t.Helper()
	out, err := exec.Command(ldconfig, "-p", "-C", file).CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p -C %s: %v\n%s", file, err, out)
	}
	var got []string
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for _, l := range lines[1:] { // first line: "N libs found in cache …"
		if strings.HasPrefix(l, "Cache generated by:") { // glibc ≥ 2.33 extension
			continue
		}
		l = strings.TrimPrefix(l, "\t")
		key, rest, ok1 := strings.Cut(l, " (")
		desc, value, ok2 := strings.Cut(rest, ") => ")
		if !ok1 || !ok2 {
			t.Fatalf("ldconfig -p: unexpected line %q", l)
		}
		got = append(got, key+"\t"+value+"\t"+ldconfigClass(desc).String())
	}
	return got
}

// ldconfigClass maps ldconfig -p's description ("libc6,x86-64, OS ABI: …")
// to a Class.
func ldconfigClass(desc string) Class {
	typ, _, _ := strings.Cut(desc, ", OS ABI")
	typ, _, _ = strings.Cut(typ, ", hwcap")
	switch typ {
	case "libc6,x86-64", "libc6,AArch64", "libc6,64bit", "ELF,x86-64":
		return Class64
	case "libc6", "ELF", "libc6,hard-float":
		return Class32
	}
	return ClassOther
}

func entryLines(c *Cache) []string {
	var got []string
	for _, e := range c.Entries {
		got = append(got, e.Key+"\t"+e.Value+"\t"+e.Class().String())
	}
	return got
}

func compareWithLdconfig(t *testing.T, ldconfig, file string) *Cache {
	t.Helper()
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	got, want := entryLines(c), ldconfigPrint(t, ldconfig, file)
	if !slices.Equal(got, want) {
		t.Errorf("%s: parsed entries differ from ldconfig -p (%d vs %d)", file, len(got), len(want))
		for _, l := range diff(got, want) {
			t.Log(l)
		}
	}
	return c
}

func diff(got, want []string) []string {
	var out []string
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			out = append(out, fmt.Sprintf("#%d got %q want %q", i, g, w))
		}
		if len(out) > 10 {
			break
		}
	}
	return out
}

func findLdconfig(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("ldconfig")
	if err != nil {
		t.Skipf("ldconfig not installed: %v", err)
	}
	return p
}

func TestHostCacheMatchesLdconfig(t *testing.T) {
	ldconfig := findLdconfig(t)
	if _, err := os.Stat("/etc/ld.so.cache"); err != nil {
		t.Skipf("host has no /etc/ld.so.cache: %v", err)
	}
	c := compareWithLdconfig(t, ldconfig, "/etc/ld.so.cache")
	if len(c.Lookup(Class64, "libc.so.6")) == 0 {
		t.Errorf("host cache: no 64-bit libc.so.6 among %d entries", len(c.Entries))
	}
}

// TestPrefixSet checks the binary-search prefix matcher against the
// obvious loop over random prefix sets from a small alphabet (so that
// prefixes often extend each other).
func TestPrefixSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, rng.IntN(5))
		for i := range b {
			b[i] = "ab."[rng.IntN(3)]
		}
		return string(b)
	}
	naive := func(s string, ps []string) bool {
		for _, p := range ps {
			if strings.HasPrefix(s, p) {
				return true
			}
		}
		return false
	}
	for range 2000 {
		ps := make([]string, rng.IntN(6))
		for i := range ps {
			ps[i] = word()
		}
		set := newPrefixSet(ps)
		for range 20 {
			s := word()
			if got, want := set.matches(s), naive(s, ps); got != want {
				t.Fatalf("prefixes %q, key %q: matches %v, want %v", ps, s, got, want)
			}
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestRead(t *testing.T) {
	data := BuildFormat(sample(), FormatCompat)
	// A plain reader, read in small pieces.
	c, _, err := ReadFiltered(iotest.OneByteReader(bytes.NewReader(data)), nil)
	if err != nil || !slices.Equal(c.Entries, sample()) {
		t.Fatalf("ReadFiltered(one byte at a time) = %v, %v", c, err)
	}
	if _, _, err := ReadFiltered(failing{}, nil); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("ReadFiltered(failing) err = %v", err)
	}
	if _, err := readLimited(zeros{}, 0, 4096); !errors.Is(err, ErrTooLarge) {
		t.Errorf("readLimited(endless) err = %v", err)
	}
	for _, hint := range []int{0, 1, len(data) - 1, len(data), len(data) + 1, 10 * len(data)} {
		got, err := readLimited(bytes.NewReader(data), hint, MaxSize)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("readLimited(hint %d) = %d bytes, %v", hint, len(got), err)
		}
	}
	if _, err := os.Stat("/dev/null"); err == nil {
		_, err := Load("/dev/null")
		if !errors.Is(err, hostfile.ErrNotRegular) || !strings.Contains(err.Error(), "/dev/null: not a regular file") {
			t.Errorf("Load(/dev/null) err = %v", err)
		}
	}
}

// TestLoadRefuses: a FIFO is refused without blocking, a huge sparse
// cache from its size, without reading it; both errors name the file.
func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want error
	}{{fifo, hostfile.ErrNotRegular}, {huge, ErrTooLarge}} {
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := Load(tt.path); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("Load(%s) err = %v, want %v naming the file", tt.path, err, tt.want)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("Load(%s) took %v", tt.path, d)
			}
		case <-time.After(time.Second):
			t.Fatalf("Load(%s) still blocked after 1s", tt.path)
		}
	}
}

func TestLookupArch(t *testing.T) {
	c, err := Parse(Build(sample()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		goarch string
		class  Class
		ok     bool
		want   []string
	}{
		{"amd64", Class64, true, []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"}},
		{"amd64", Class32, true, []string{"/usr/lib/i386-linux-gnu/libcuda.so.1"}},
		{"arm64", Class64, true, []string{"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1"}},
		{"arm64", Class32, true, []string{"/usr/lib/arm-linux-gnueabihf/libnvidia-ml.so.1"}},
		{"ppc64le", Class64, true, []string{"/usr/lib/powerpc64le-linux-gnu/libnvidia-ml.so.1"}},
		{"ppc64le", Class32, false, nil},
		{"riscv64", Class64, false, nil},
		{"amd64", ClassOther, false, nil},
	} {
		arch, ok := archFor(tc.goarch, tc.class)
		if ok != tc.ok {
			t.Errorf("archFor(%s, %v) ok = %v", tc.goarch, tc.class, ok)
			continue
		}
		if !ok {
			continue
		}
		var got []string
		for _, e := range c.LookupArch(arch, "libcuda", "libnvidia-ml") {
			got = append(got, e.Value)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: got %q, want %q", tc.goarch, tc.class, got, tc.want)
		}
	}
	if a, ok := HostArch(Class64); runtime.GOARCH == "amd64" && (a != ArchX8664 || !ok) {
		t.Errorf("HostArch(Class64) = %#x %v", a, ok)
	}
}
