package ocispec

import (
	"bytes"
	"encoding/json"
	"testing"
)

// jsonEncode is what encode must give: encoding/json's Encoder, HTML
// escaping off.
func jsonEncode(t testing.TB, v any) ([]byte, error) {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return b.Bytes(), err
}

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"null", nil},
		{"scalars", object{"t": true, "f": false, "n": nil, "num": json.Number("-1.5e+10"), "zero": json.Number("")}},
		{"escapes", []any{"a\"b\\c", "\b\f\n\r\t\x00\x01\x1f\x7f", "<html>&", "\u2028\u2029", "ü€😀", "bad\xff\xfeutf8", "\xe2\x80"}},
		{"nesting", object{"b": []any{object{}, []any{}, object{"z": 1.5, "a": []any{nil}}}, "a": object{"k": "v"}}},
		{"nil containers", object{"o": object(nil), "a": []any(nil)}},
		{"keys sorted and escaped", object{"é": 1, "Z": 2, "a\"": 3, "\n": 4, "": 5}},
		{"other types", object{"ints": []int{1, 2}, "u": uint32(7), "s": []string{"<x>"}, "m": map[string]int{"b": 1, "a": 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := jsonEncode(t, tt.v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encode(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encode:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestEncodeRefusesInvalidNumber(t *testing.T) {
	for _, n := range []string{"01", "1.", ".5", "+1", "1e", "1e+", "-", "NaN", "1 ", "0x10", "1.5e3.2"} {
		if _, err := encode(object{"n": json.Number(n)}); err == nil {
			t.Errorf("encode accepted the number literal %q", n)
		}
		if _, err := jsonEncode(t, object{"n": json.Number(n)}); err == nil {
			t.Errorf("encoding/json accepts %q: the test's list is wrong", n)
		}
	}
	for _, n := range []string{"0", "-0", "10", "1.5", "1e5", "1E-5", "-12.25e+3"} {
		if _, err := encode(object{"n": json.Number(n)}); err != nil {
			t.Errorf("encode refused %q: %v", n, err)
		}
	}
}

// FuzzEncode checks that encode gives encoding/json's bytes for every tree
// a UseNumber decode makes, and for numbers and strings taken verbatim.
func FuzzEncode(f *testing.F) {
	f.Add([]byte(`{"ociVersion":"1.2.0","process":{"env":["A=<b>&c","\u2028"]},"mounts":[{"destination":"/x","options":["ro"]}],"n":-1.5e3}`), "x\xff\"", "1.5")
	f.Add([]byte(`[1,true,null,"\u0000\t"]`), "\u2029", "-0e+1")
	f.Fuzz(func(t *testing.T, data []byte, s, num string) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			v = nil
		}
		tree := object{"doc": v, s: s, "num": json.Number(num)}
		want, werr := jsonEncode(t, tree)
		got, gerr := encode(tree)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("errors differ: encoding/json %v, encode %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("encode:\n got %s\nwant %s", got, want)
		}
	})
}
