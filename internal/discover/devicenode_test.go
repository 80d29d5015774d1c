package discover

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/devnum"
)

func TestDeviceNodeNumbers(t *testing.T) {
	tests := []struct {
		n  DeviceNode
		id string
	}{
		{DeviceNode{Path: "/dev/nvidiactl", Major: devnum.MajorNVIDIA, Minor: devnum.MinorCtl}, "195:255"},
		{DeviceNode{Path: "/dev/nvidia-modeset", Major: devnum.MajorNVIDIA, Minor: devnum.MinorModeset}, "195:254"},
		{DeviceNode{Path: "/dev/nvidia-uvm-tools", Major: 510, Minor: devnum.MinorUVMTools}, "510:1"},
		{DeviceNode{Path: "/dev/nvidia3", Major: devnum.MajorNVIDIA, Minor: 3}, "195:3"},
	}
	for _, tt := range tests {
		if got := tt.n.ID(); got != tt.id {
			t.Errorf("%s: ID = %q, want %q", tt.n.Path, got, tt.id)
		}
		if got := tt.n.Dev(); unix.Major(got) != tt.n.Major || unix.Minor(got) != tt.n.Minor {
			t.Errorf("%s: Dev = %#x, want %d:%d", tt.n.Path, got, tt.n.Major, tt.n.Minor)
		}
	}
}
