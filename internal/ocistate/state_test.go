package ocistate

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseState(t *testing.T) {
	tests := []struct {
		in   string
		want State
	}{
		{`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/run/containerd/b","annotations":{"a":"b"}}`,
			State{Version: "1.0.2", ID: "c1", Status: "created", Pid: 4242, Bundle: "/run/containerd/b", Annotations: map[string]string{"a": "b"}}},
		{`{"id":"old","pid":7,"bundlePath":"/var/run/docker/b"}`, State{ID: "old", Pid: 7, Bundle: "/var/run/docker/b"}},
		{`{"pid":7,"bundle":"/new","bundlePath":"/old","unknown":[1,2]}` + "\n", State{Pid: 7, Bundle: "/new"}},
	}
	for _, tt := range tests {
		got, err := ParseState([]byte(tt.in))
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseState(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	errs := []struct{ in, want string }{
		{"", "OCI state: empty input"},
		{" \n", "OCI state: empty input"},
		{"{", "OCI state: invalid JSON"},
		{`{"pid":1,"bundle":"/b"} x`, "OCI state: invalid JSON at byte"},
		{`[1]`, "OCI state: want a JSON object, not a JSON array"},
		{`{"pid":"12","bundle":"/b"}`, `OCI state: field "pid": want int, not a JSON string`},
		{`{"pid":1.5,"bundle":"/b"}`, `field "pid"`},
		{`{"bundle":"/b"}`, "OCI state: pid 0: want the container's process id"},
		{`{"pid":-3,"bundle":"/b"}`, "pid -3"},
		{`{"pid":3}`, `OCI state: no bundle (neither "bundle" nor "bundlePath" is set)`},
		{`null`, "pid 0"},
	}
	for _, tt := range errs {
		_, err := ParseState([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseState(%q) = %v, want %q", tt.in, err, tt.want)
		}
	}
}

// TestParseStateRoot: ParseState keeps a string "root" and ignores one of
// another type (the runtime hook does not use it).
func TestParseStateRoot(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"pid":1,"bundle":"/b","root":"/r"}`, "/r"},
		{`{"pid":1,"bundle":"/b","root":{"path":"rootfs"}}`, ""},
		{`{"pid":1,"bundle":"/b","root":null}`, ""},
	}
	for _, tt := range tests {
		got, err := ParseState([]byte(tt.in))
		if err != nil || got.Root != tt.want || got.Pid != 1 || got.Bundle != "/b" {
			t.Errorf("ParseState(%s) = %+v, %v; want root %q", tt.in, got, err, tt.want)
		}
	}
}

func TestDecodeState(t *testing.T) {
	tests := []struct {
		in   string
		want State
	}{
		{`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/run/containerd/b","annotations":{"a":"b"}}`,
			State{Version: "1.0.2", ID: "c1", Status: "created", Pid: 4242, Bundle: "/run/containerd/b", Annotations: map[string]string{"a": "b"}}},
		{`{"pid":3,"bundlePath":"/b"}`, State{Pid: 3, Bundle: "/b"}},
		{`{"pid":7,"bundle":"/new","bundlePath":"/old","unknown":[1,2]}` + "\n", State{Pid: 7, Bundle: "/new"}},
		{`{"root":"/r"}`, State{Root: "/r"}},
		{`{"root":"rootfs","bundle":"/b"}`, State{Root: "rootfs", Bundle: "/b"}},
		{`{"root":null,"bundle":"rel"}`, State{Bundle: "rel"}},
		{`{"pid":-3}`, State{Pid: -3}},
		{`{}`, State{}},
		{`null`, State{}},
	}
	for _, tt := range tests {
		got, err := DecodeState([]byte(tt.in))
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeState(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	errs := []struct{ in, want string }{
		{"", "OCI state: empty input"},
		{" \t\n", "OCI state: empty input"},
		{"{", "OCI state: invalid JSON"},
		{`{"bundle":"/b"} x`, "OCI state: invalid JSON at byte"},
		{`[]`, "OCI state: want a JSON object, not a JSON array"},
		{`"s"`, "OCI state: want a JSON object, not a JSON string"},
		{`{"pid":"x","bundle":"/b"}`, `OCI state: field "pid": want int, not a JSON string`},
		{`{"pid":1e99}`, `OCI state: field "pid"`},
		{`{"bundle":3}`, `OCI state: field "bundle": want string, not a JSON number`},
		{`{"bundlePath":true}`, `OCI state: field "bundlePath": want string, not a JSON bool`},
		{`{"annotations":{"a":1}}`, `OCI state: field "annotations": want string, not a JSON number`},
		{`{"root":{"path":"rootfs"},"bundle":"/b"}`, `OCI state: field "root": want string, not a JSON object`},
		{`{"root":1}`, `OCI state: field "root": want string, not a JSON number`},
	}
	for _, tt := range errs {
		got, err := DecodeState([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeState(%q) = %+v, %v; want error %q", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseState checks that any stdin either parses to a state with a
// positive pid and a bundle or fails with an error.
func FuzzParseState(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/run/b"}`,
		`{"pid":7,"bundlePath":"/var/run/docker/b"}`, `{"pid":"1"}`, `[]`, `null`, ``, `{"pid":1e99,"bundle":"/b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseState(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "OCI state: ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if s.Pid <= 0 || s.Bundle == "" {
			t.Fatalf("accepted state %+v", s)
		}
	})
}

// FuzzDecodeState checks that DecodeState never panics, words every error
// with "OCI state: ", agrees with ParseState (which accepts exactly the
// decoded states with a positive pid and a bundle) and reads root the same.
func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{
		`{"ociVersion":"1.0.2","id":"c1","status":"created","pid":4242,"bundle":"/run/b","annotations":{"a":"b"}}`,
		`{"pid":7,"bundlePath":"/var/run/docker/b"}`, `{"root":"/r"}`, `{"root":"rootfs","bundle":"/b"}`,
		`{"root":{"path":"rootfs"},"pid":1,"bundle":"/b"}`, `{"root":null}`, `{"bundlePath":"x"}`,
		`{"pid":"1"}`, `{"annotations":{"a":1}}`, `[]`, `null`, `"s"`, ``, `{`, `{"pid":1e99,"bundle":"/b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, derr := DecodeState(data)
		p, perr := ParseState(data)
		for _, err := range []error{derr, perr} {
			if err != nil && !strings.HasPrefix(err.Error(), "OCI state: ") {
				t.Fatalf("error without context: %v", err)
			}
		}
		if derr != nil {
			if perr == nil && !strings.Contains(derr.Error(), `field "root"`) {
				t.Fatalf("DecodeState failed (%v) but ParseState accepted %+v", derr, p)
			}
			return
		}
		if wantOK := d.Pid > 0 && d.Bundle != ""; wantOK != (perr == nil) {
			t.Fatalf("DecodeState = %+v but ParseState error %v", d, perr)
		}
		if perr == nil && !reflect.DeepEqual(d, p) {
			t.Fatalf("DecodeState = %+v, ParseState = %+v", d, p)
		}
	})
}
