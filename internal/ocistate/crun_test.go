package ocistate

import (
	"errors"
	"strings"
	"testing"
)

// TestCrunHook: under crun (the hook's parent and that one's parent named
// crun) FindHook takes the root and bundle from the OCI state, read only
// then, and the working directory must be the bundle; anything else is
// ErrNotCrunHook.
func TestCrunHook(t *testing.T) {
	bundle := t.TempDir()
	other := t.TempDir()
	good := `{"ociVersion":"1.0","id":"c","pid":0,"root":"` + bundle + `/rootfs","bundle":"` + bundle + `","status":"created"}`
	for _, tt := range []struct {
		name, parent, grandparent, state, cwd string
		want                                  string // an absolute root, else the error says this
		stateRead                             bool
	}{
		{"crun's hook", "crun", "crun", good, bundle, bundle + "/rootfs", true},
		{"relative root", "crun", "crun", `{"ociVersion":"1.0","id":"c","root":"rootfs","bundle":"` + bundle + `"}`, bundle, bundle + "/rootfs", true},
		{"parent not crun", "youki", "youki", good, bundle, `the parent is "youki"`, false},
		{"a createRuntime hook (crun's parent is the engine)", "crun", "conmon", good, bundle, `the parent's parent is "conmon"`, false},
		{"no root in the state", "crun", "crun", `{"ociVersion":"1.0","id":"c","bundle":"` + bundle + `"}`, bundle, "no root", true},
		{"working elsewhere", "crun", "crun", good, other, "not the bundle", true},
		{"bad state", "crun", "crun", `{"id":`, bundle, "OCI state", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proc := t.TempDir()
			writeFile(t, proc, "self/stat", "4242 (nvidia-cdi-hook) S 77 4242 1\n")
			writeFile(t, proc, "77/stat", "77 ("+tt.parent+") S 55 77 1\n")
			writeFile(t, proc, "55/stat", "55 ("+tt.grandparent+") S 1 55 1\n")
			read := false
			h, err := FindHook(proc, tt.cwd, false, func() ([]byte, error) { read = true; return []byte(tt.state), nil })
			if read != tt.stateRead {
				t.Errorf("state read: %v, want %v", read, tt.stateRead)
			}
			if strings.HasPrefix(tt.want, "/") {
				if err != nil || h != (RuntimeHook{Root: tt.want, Bundle: bundle, Runtime: 55}) {
					t.Errorf("FindHook = %+v, %v; want root %s", h, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrNotCrunHook) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FindHook = %+v, %v; want ErrNotCrunHook saying %q", h, err, tt.want)
			}
		})
	}
}

// TestFindHook: the caller's parent, read once, picks runc's way (the
// state unread: RuncHook's answer) or crun's (TestCrunHook); any other
// parent is an error of both kinds.
func TestFindHook(t *testing.T) {
	root := t.TempDir()
	b := t.TempDir()
	writeFile(t, b, "config.json", `{"root":{"path":"`+root+`"}}`)
	proc := fakeRunc{selfStat: "4242 (nvidia-cdi-hook) S 77 4242 1\n", comm: "runc:[2:INIT]", initRest: "S 55 77 1", cwd: b}.make(t)
	h, err := FindHook(proc, root, false, func() ([]byte, error) { t.Error("state read under runc"); return nil, nil })
	if err != nil || h != (RuntimeHook{Root: root, Bundle: b, Runtime: 55}) {
		t.Errorf("FindHook under runc = %+v, %v", h, err)
	}
	proc = fakeRunc{selfStat: "4242 (nvidia-cdi-hook) S 77 4242 1\n", comm: "youki", initRest: "S 55 77 1"}.make(t)
	if _, err := FindHook(proc, root, false, nil); !errors.Is(err, ErrNotRuncHook) || !errors.Is(err, ErrNotCrunHook) {
		t.Errorf("FindHook under youki = %v; want an error of both kinds", err)
	}
}
