package caps

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    []Capability
		wantErr string
	}{
		{"", nil, ""},
		{"compute,utility", []Capability{Compute, Utility}, ""},
		{" compute , ,video ", []Capability{Compute, Video}, ""},
		{"all", All(), ""},
		{"utility,all", All(), ""},
		{"compute,gpu", nil, `unknown driver capability "gpu"`},
		{"Compute", nil, `unknown driver capability "Compute"`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			s, err := Parse(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) error %v, want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if got := s.List(); !slices.Equal(got, want) {
				t.Errorf("Parse(%q) = %v, want %v", tc.in, got, want)
			}
		})
	}
}

func TestLibraryCapabilities(t *testing.T) {
	tests := []struct {
		set  Set
		want []Capability
	}{
		{Default(), []Capability{Utility, Compute}},
		{Set{Video: true}, []Capability{Compute, Video}},
		{Set{Display: true}, []Capability{Graphics}},
		{Set{NGX: true, Graphics: true}, []Capability{NGX, Graphics}},
		{Set{Compat32: true}, nil},
		{Full(), []Capability{Utility, Compute, NGX, Video, Graphics}},
	}
	for _, tc := range tests {
		if got := tc.set.LibraryCapabilities(); !slices.Equal(got, tc.want) {
			t.Errorf("%v.LibraryCapabilities() = %v, want %v", tc.set, got, tc.want)
		}
	}
}

func TestLists(t *testing.T) {
	for _, g := range LibraryGroupOrder() {
		if len(Libraries(g)) == 0 {
			t.Errorf("library group %s has no libraries", g)
		}
		for _, l := range Libraries(g) {
			if !strings.HasSuffix(l, ".so") {
				t.Errorf("library prefix %q does not end in .so", l)
			}
		}
	}
	if Libraries(Compat32) != nil || Binaries(Video) != nil {
		t.Error("compat32 is no library group; video selects no binaries")
	}
	if !slices.Contains(Binaries(Utility), "nvidia-smi") || !slices.Contains(Libraries(Compute), "libcuda.so") {
		t.Error("nvidia-smi / libcuda.so missing from their capability")
	}
	// The lists are fresh copies: changing one does not change the next.
	Libraries(Compute)[0] = "x"
	if Libraries(Compute)[0] != "libcuda.so" {
		t.Error("Libraries returned shared state")
	}
}
