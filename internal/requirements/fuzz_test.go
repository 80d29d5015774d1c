package requirements

import (
	"errors"
	"testing"
)

// FuzzParse checks that any input either parses, renders back to an
// expression that parses to the same thing, and evaluates without panicking,
// or fails with a *SyntaxError. Seeds: testdata/fuzz/FuzzParse (real CUDA
// image requirements among them) and the ones below.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"cuda>=12.1", "cuda>=13.0 brand=unknown,driver>=535,driver<536", require122, require130,
		"arch=8.0 arch=9.0", "brand!=geforce", "cuda>=abc", "cuda==12", "", " ", "a,,b", "driver<=580.159.04",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q): error %T, want *SyntaxError", s, err)
			}
			_ = err.Error()
			return
		}
		again, err := Parse(e.String())
		if err != nil {
			t.Fatalf("Parse(%q) ok but canonical form %q fails: %v", s, e.String(), err)
		}
		if again.String() != e.String() {
			t.Fatalf("canonical form not stable: %q -> %q", e.String(), again.String())
		}
		for _, facts := range []Facts{h100, {}, {CUDA: "12.2", Driver: "535.1", Devices: []DeviceFacts{{Index: "0:1", Arch: "8.0", Brand: "Tesla"}}}} {
			if _, err := Evaluate([]Expr{e}, facts); err != nil {
				var u *UnsatisfiedError
				if !errors.As(err, &u) {
					t.Fatalf("Evaluate(%q): error %T, want *UnsatisfiedError", s, err)
				}
				_ = err.Error()
			}
		}
	})
}
