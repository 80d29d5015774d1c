package selector

import (
	"errors"
	"strings"
	"testing"
)

// FuzzResolve checks that any device list either resolves to GPUs of the
// host, without duplicates and with every MIG device's parent selected, or
// fails with a *Error naming one of the list's tokens.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{
		"all", "0", "1,3", "1,,x", "-1", "99999999999999999999", "GPU-21111111-2222-3333-4444-555555555555",
		"00000000:0A:00.0", "0:a:0.1", "2:1", "MIG-aaaaaaaa-0000-0000-0000-000000000000",
		"MIG-GPU-21111111-2222-3333-4444-555555555555/1/0", "nvidia.com/gpu=0", " 3 , 2:0 ", "none", "void",
	} {
		f.Add(s)
	}
	d := testDriver()
	f.Fuzz(func(t *testing.T, list string) {
		sel, err := Resolve(d, []string{list})
		if err != nil {
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("Resolve(%q): error %T, want *Error", list, err)
			}
			if msg := err.Error(); strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("Resolve(%q): error %q is not one line", list, msg)
			}
			return
		}
		seen := map[int]bool{}
		for _, g := range sel.GPUs {
			if seen[g.Index] {
				t.Fatalf("Resolve(%q): GPU %d twice", list, g.Index)
			}
			seen[g.Index] = true
		}
		for _, m := range sel.MIG {
			if !seen[m.Parent.Index] {
				t.Fatalf("Resolve(%q): MIG %s without its parent", list, m.Name())
			}
		}
		if len(Split(list)) > 0 && sel.Empty() {
			t.Fatalf("Resolve(%q): nothing selected and no error", list)
		}
	})
}
