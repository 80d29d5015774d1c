package discover

import (
	"path"
	"slices"
	"testing"

	"github.com/nctk/nctk/internal/caps"
)

func TestControlNodesFor(t *testing.T) {
	d := &Driver{}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		d.ControlNodes = append(d.ControlNodes, DeviceNode{Path: "/dev/" + n})
	}
	for _, tt := range []struct {
		caps string
		want []string
	}{
		{"utility", []string{"nvidiactl"}},
		{"compute", []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}},
		{"video", []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}},
		{"display", []string{"nvidiactl", "nvidia-modeset"}},
		{"all", []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}},
	} {
		s, err := caps.Parse(tt.caps)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range d.ControlNodesFor(s) {
			got = append(got, path.Base(n.Path))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.caps, got, tt.want)
		}
	}
}
