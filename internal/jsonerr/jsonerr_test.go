package jsonerr

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	var v struct {
		A struct {
			B int `json:"b"`
		} `json:"a"`
	}
	tests := []struct{ in, want string }{
		{"{\n  \"a\": {\"b\": 1},\n}", "malformed JSON at line 3, column 1 (byte offset 20)"},
		{`{"a": {"b": "x"}}`, `field a.b: JSON string cannot be a int (line 1, column 16, byte offset 15)`},
		{`[1]`, "field (top level): JSON array cannot be a struct"},
		{"{\"a\":\n", "malformed JSON at line 1, column 6 (byte offset 6)"},
	}
	for _, tt := range tests {
		err := Describe([]byte(tt.in), json.Unmarshal([]byte(tt.in), &v))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Describe(%q) = %v, want %q", tt.in, err, tt.want)
		}
	}
	data := []byte("{}\n x")
	if err := Describe(data, TrailingDataError{Offset: 2}); err == nil || !strings.Contains(err.Error(), "line 1, column 3 (byte offset 2): unexpected data") {
		t.Errorf("trailing data: %v", err)
	}
	if err := Describe(data, io.ErrUnexpectedEOF); err == nil || !strings.Contains(err.Error(), "unexpected end of file at line 2, column 3 (byte offset 5)") {
		t.Errorf("input cut short: %v", err)
	}
	other := errors.New("read failed")
	if err := Describe(data, other); err != other {
		t.Errorf("another error changed: %v", err)
	}
}
