package e2e

import "testing"

func TestParseCRILog(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "empty", in: "", want: ""},
		{name: "full lines", in: "2026-11-23T21:04:51.1Z stdout F a b\n2026-11-23T21:04:51.2Z stderr F c\n", want: "a b\nc\n"},
		{name: "partial joined", in: "2026-11-23T21:04:51.1Z stdout P ab\n2026-11-23T21:04:51.2Z stdout F cd\n", want: "abcd\n"},
		{name: "empty content", in: "2026-11-23T21:04:51.1Z stdout F\n2026-11-23T21:04:51.2Z stdout F \n", want: "\n\n"},
		{name: "no final newline", in: "2026-11-23T21:04:51.1Z stdout F x", want: "x\n"},
		{name: "malformed", in: "garbage\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCRILog(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseCRILog(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseCRILog(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
