package echo

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuote(t *testing.T) {
	long := strings.Repeat("cuda>=12.0 ", 4000) // 44,000 bytes
	tests := []struct {
		name, in, want string
	}{
		{"short", "0,1", `"0,1"`},
		{"empty", "", `""`},
		{"newline", "0\nlevel=error msg=forged", `"0\nlevel=error msg=forged"`},
		{"exactly MaxValue", strings.Repeat("a", MaxValue), `"` + strings.Repeat("a", MaxValue) + `"`},
		{"long", long, `"` + long[:MaxValue] + `"… (44000 bytes)`},
		{"cut inside a rune", strings.Repeat("a", MaxValue-1) + "é" + strings.Repeat("b", 10),
			`"` + strings.Repeat("a", MaxValue-1) + `"… (139 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quote(tt.in); got != tt.want {
				t.Errorf("Quote = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "GPU-0a1b", "GPU-0a1b"},
		{"spaces, quotes and backslashes kept", `a b "c" \d`, `a b "c" \d`},
		{"newline and CR", "0\r\nlevel=error", `0\r\nlevel=error`},
		{"NUL, ESC and DEL", "a\x00b\x1b[31mc\x7f", `a\x00b\x1b[31mc\x7f`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
		{"UTF-8 kept", "Grüße", "Grüße"},
		{"long", strings.Repeat("x", 1000), strings.Repeat("x", MaxValue) + "… (1000 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Text(tt.in); got != tt.want {
				t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestError(t *testing.T) {
	err := errors.New("a\nb" + strings.Repeat("c", 2*MaxMessage))
	got := Error(err)
	if !strings.HasPrefix(got, `a\nbccc`) || strings.Contains(got, "\n") || len(got) > MaxMessage+32 {
		t.Errorf("Error = %.40q… (%d bytes)", got, len(got))
	}
}

func TestLine(t *testing.T) {
	if got := Line("a\nb", 100); got != `a\nb` {
		t.Errorf("Line = %q", got)
	}
	msg := strings.Repeat("é", 3000) // 6000 bytes
	got := Line(msg, 4096)
	if !strings.HasSuffix(got, "… (6000 bytes)") || len(got) > 4096+len("… (6000 bytes)") || !utf8.ValidString(got) {
		t.Errorf("Line(6000 bytes) = %d bytes, suffix %q", len(got), got[len(got)-20:])
	}
}

// FuzzText: whatever the input, Text and Quote give one valid UTF-8 line
// of bounded length.
func FuzzText(f *testing.F) {
	f.Add("0\nlevel=error")
	f.Add(strings.Repeat("\xff", 300))
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{Text(s), Quote(s), Line(s, 64)} {
			if strings.ContainsAny(out, "\n\r") || !utf8.ValidString(out) {
				t.Fatalf("%q: not one valid line", out)
			}
			if len(out) > 4*MaxValue+64 {
				t.Fatalf("%d bytes", len(out))
			}
		}
	})
}

func TestWrap(t *testing.T) {
	base := errors.New("invalid character '\r' in name \"A\r0\"\nsecond line")
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"control characters", base, `invalid character '\r' in name "A\r0"\nsecond line`},
		{"long", errors.New(strings.Repeat("x", MaxMessage+10)), strings.Repeat("x", MaxMessage) + "… (4106 bytes)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Wrap(tt.err)
			if tt.err == nil {
				if got != nil {
					t.Fatalf("Wrap(nil) = %v", got)
				}
				return
			}
			if got.Error() != tt.want {
				t.Errorf("Wrap(%q) = %q, want %q", tt.err, got, tt.want)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("Wrap(%q) does not unwrap to it", tt.err)
			}
		})
	}
}
