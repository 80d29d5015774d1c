package plan

import (
	"path"
	"testing"
)

func TestOverlaps(t *testing.T) {
	for _, tt := range []struct {
		a, b []string
		want bool
	}{
		{[]string{"/proc/driver/nvidia"}, []string{"/proc/driver/nvidia"}, true},
		{[]string{"/proc/driver/nvidia"}, []string{"/proc"}, true},
		{[]string{"/proc/driver"}, []string{"/proc/driver/nvidia/gpus/x"}, true},
		{[]string{"proc/driver/nvidia/"}, []string{"/proc/driver/./nvidia"}, true},
		{[]string{"/proc/driver/nvidia"}, []string{"/proc/driver/nvidia2", "/proc/drive"}, false},
		{[]string{"/dev/dri/by-path/x"}, []string{"/"}, true},
		{nil, []string{"/"}, false},
		{[]string{"/a"}, nil, false},
	} {
		if got := Overlaps(tt.a, tt.b); got != tt.want {
			t.Errorf("Overlaps(%q, %q) = %v", tt.a, tt.b, got)
		}
		// The same on paths cleaned once.
		var clean []string
		for _, p := range tt.b {
			clean = append(clean, path.Clean("/"+p))
		}
		got := false
		for _, p := range tt.a {
			got = got || OverlapsClean(path.Clean("/"+p), clean)
		}
		if got != tt.want {
			t.Errorf("OverlapsClean(%q, %q) = %v", tt.a, clean, got)
		}
	}
}
