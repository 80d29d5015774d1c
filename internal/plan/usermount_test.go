package plan

import "testing"

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
	}
}
