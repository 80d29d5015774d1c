package ldcache

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	golden, _ := filepath.Glob("testdata/*.cache")
	for _, p := range golden {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, format := range []Format{FormatNew, FormatCompat, FormatOld} {
		f.Add(BuildFormat(sample(), format))
		f.Add(BuildFormat(sample()[:1], format))
		f.Add(BuildFormat(nil, format))
	}
	f.Add([]byte(newMagicFull))
	f.Add([]byte(oldMagic + "\x00\x01\x00\x00\x00"))

	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		c, err := Parse(data)
		if !bytes.Equal(data, orig) {
			t.Fatal("Parse modified its input")
		}
		c2, _, err2 := parseOwned(bytes.Clone(data), nil)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("Parse err %v, parseOwned err %v", err, err2)
		}
		// The filtered read fails as the whole one does and keeps exactly
		// the entries its filter accepts, in file order.
		keep := func(k string) bool { return strings.HasPrefix(k, "libc") }
		c3, total, err3 := ReadFiltered(bytes.NewReader(data), keep)
		if (err == nil) != (err3 == nil) || err != nil && err.Error() != err3.Error() {
			t.Fatalf("Parse err %v, ReadFiltered err %v", err, err3)
		}
		if err == nil {
			want := slices.DeleteFunc(slices.Clone(c.Entries), func(e Entry) bool { return !keep(e.Key) })
			if !slices.Equal(c3.Entries, want) || total != len(c.Entries) || !slices.Equal(c3.HWCaps, c.HWCaps) {
				t.Fatalf("ReadFiltered kept %d of %d entries, want %d of %d", len(c3.Entries), total, len(want), len(c.Entries))
			}
		}
		if err != nil {
			if c != nil {
				t.Fatal("non-nil cache with error")
			}
			return
		}
		if !slices.Equal(c.Entries, c2.Entries) {
			t.Fatal("Parse and parseOwned disagree")
		}
		for i, e := range c.Entries {
			if strings.IndexByte(e.Key, 0) >= 0 || strings.IndexByte(e.Value, 0) >= 0 {
				t.Fatalf("entry %d holds a NUL: %+v", i, e)
			}
		}
		for _, cl := range []Class{Class64, Class32, ClassOther} {
			_ = c.Lookup(cl, "lib")
		}
		// What was parsed must survive a rebuild.
		back, err := Parse(Build(c.Entries))
		if err != nil {
			t.Fatalf("rebuilt cache does not parse: %v", err)
		}
		if !slices.Equal(back.Entries, c.Entries) {
			t.Fatal("rebuilt cache differs")
		}
	})
}
