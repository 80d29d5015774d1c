package ocispec

import (
	"os"
	"reflect"
	"testing"
	"unicode/utf8"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// checkGenericOf compares genericOf(v) with toGeneric(v) (json.Marshal,
// then a UseNumber decode); invalid UTF-8 must refuse the direct form.
func checkGenericOf(t *testing.T, name string, v any, wantOK bool) {
	t.Helper()
	got, ok := genericOf(v)
	if ok != wantOK {
		t.Fatalf("%s: genericOf ok = %v, want %v", name, ok, wantOK)
	}
	if !ok {
		return
	}
	want, err := toGeneric(v)
	if err != nil {
		t.Fatal(err)
	}
	if want == nil {
		want = []any{}
	}
	if !reflect.DeepEqual(any(got), want) {
		t.Errorf("%s: genericOf\n%#v\ntoGeneric\n%#v", name, got, want)
	}
}

// TestGenericOfMatchesJSON: the generic forms built without encoding/json
// are what encoding/json gives, for every field set and unset.
func TestGenericOfMatchesJSON(t *testing.T) {
	mode := os.FileMode(0o620)
	u, g := uint32(0), uint32(4294967295)
	maj, min := int64(-1), int64(9223372036854775807)
	timeout := -3
	ids := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}, {}}
	tests := []struct {
		name string
		v    any
		ok   bool
	}{
		{"strings", []string{"", "PATH=/bin", "é\u2028<>&"}, true},
		{"strings/empty", []string{}, true},
		{"strings/invalid UTF-8", []string{"a\xffb"}, false},
		{"gids", []uint32{0, 44, 4294967295}, true},
		{"mounts", []specs.Mount{
			{Destination: "/a"},
			{Destination: "/b", Type: "bind", Source: "/s", Options: []string{"ro", "rbind"}},
			{Destination: "/c", Options: []string{}, UIDMappings: ids, GIDMappings: ids[:1]},
			{},
		}, true},
		{"mounts/invalid UTF-8", []specs.Mount{{Destination: "/a", Options: []string{"\xc3"}}}, false},
		{"devices", []specs.LinuxDevice{
			{Path: "/dev/x", Type: "c", Major: 195, Minor: 255},
			{Path: "/dev/y", Type: "b", Major: -1, Minor: 0, FileMode: &mode, UID: &u, GID: &g},
			{},
		}, true},
		{"devices/invalid UTF-8", []specs.LinuxDevice{{Path: "/dev/\xff"}}, false},
		{"cgroup rules", []specs.LinuxDeviceCgroup{
			{Allow: false, Access: "rwm"},
			{Allow: true, Type: "c", Major: &maj, Minor: &min, Access: "rw"},
			{},
		}, true},
		{"hooks", []specs.Hook{
			{Path: "/bin/h"},
			{Path: "/bin/h", Args: []string{"h", "x"}, Env: []string{"A=1"}, Timeout: &timeout},
			{Args: []string{}, Env: []string{}},
		}, true},
		{"hooks/invalid UTF-8", []specs.Hook{{Path: "/bin/h", Env: []string{"A=\xfe"}}}, false},
		{"not a list it knows", []specs.LinuxNamespace{{Type: "pid"}}, false},
	}
	for _, tt := range tests {
		checkGenericOf(t, tt.name, tt.v, tt.ok)
	}
}

// FuzzGenericOf: for any strings and numbers, the direct generic forms
// equal encoding/json's, or are refused (invalid UTF-8).
func FuzzGenericOf(f *testing.F) {
	f.Add("/dev/nvidia0", "c", "rw", int64(195), int64(0), uint32(0o666), true, 5)
	f.Add("", "", "", int64(-1), int64(1<<62), uint32(0), false, -1)
	f.Add("/a\xff", "\u2028", "<&>", int64(0), int64(0), uint32(1), true, 0)
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, i1, i2 int64, u uint32, b bool, n int) {
		valid := utf8.ValidString(s1) && utf8.ValidString(s2) && utf8.ValidString(s3)
		mode := os.FileMode(u)
		ptr := func(i int64) *int64 { return &i }
		var timeout *int
		if b {
			timeout = &n
		}
		var opts []string
		if n%2 == 0 {
			opts = []string{s2, s3}
		}
		vals := []any{
			[]string{s1, s2, s3},
			[]uint32{u, uint32(n)},
			[]specs.Mount{{Destination: s1, Type: s2, Source: s3, Options: opts, UIDMappings: []specs.LinuxIDMapping{{ContainerID: u, HostID: uint32(i1), Size: uint32(i2)}}}},
			[]specs.LinuxDevice{{Path: s1, Type: s2, Major: i1, Minor: i2, FileMode: &mode, UID: &u}},
			[]specs.LinuxDeviceCgroup{{Allow: b, Type: s2, Major: ptr(i1), Access: s3}},
			[]specs.Hook{{Path: s1, Args: opts, Env: []string{s3}, Timeout: timeout}},
		}
		for _, v := range vals {
			got, ok := genericOf(v)
			if !ok {
				if valid {
					t.Fatalf("%T refused with valid UTF-8 strings", v)
				}
				continue
			}
			want, err := toGeneric(v)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(any(got), want) {
				t.Fatalf("%T: genericOf\n%#v\ntoGeneric\n%#v", v, got, want)
			}
		}
	})
}
