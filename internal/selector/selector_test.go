package selector

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/requirements"
)

// Empty reports whether nothing is selected (a test helper).
func (s Selection) Empty() bool { return len(s.GPUs) == 0 && len(s.MIG) == 0 }

// testDriver has four GPUs whose minors do not follow their indices, and MIG
// enabled on GPU 2.
func testDriver() *discover.Driver {
	d := &discover.Driver{Version: "535.261.03"}
	buses := []string{"00000000:07:00.0", "00000000:0A:00.0", "00000001:41:00.0", "00000000:C1:00.0"}
	minors := []int{2, 0, 3, 1}
	for i := range 4 {
		g := discover.GPU{
			Index: i,
			Minor: minors[i],
			UUID:  fmt.Sprintf("GPU-%d1111111-2222-3333-4444-555555555555", i),
			BusID: buses[i],
		}
		if i == 2 {
			g.MIGCapable, g.MIGEnabled = true, true
			g.MIGDevices = []discover.MIGDevice{
				{Index: 0, UUID: "MIG-aaaaaaaa-0000-0000-0000-000000000000", GI: 1, CI: 0},
				{Index: 1, UUID: "MIG-bbbbbbbb-0000-0000-0000-000000000000", GI: 2, CI: 0},
			}
		}
		if i == 3 {
			g.MIGCapable = true
		}
		d.GPUs = append(d.GPUs, g)
	}
	return d
}

func names(s Selection) (gpus []int, migs []string) {
	for _, g := range s.GPUs {
		gpus = append(gpus, g.Index)
	}
	for _, m := range s.MIG {
		migs = append(migs, m.Name())
	}
	return gpus, migs
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name   string
		tokens []string
		gpus   []int
		migs   []string
		all    bool
	}{
		{"empty", nil, nil, nil, false},
		{"only empties", []string{"", " , ,"}, nil, nil, false},
		{"all", []string{"all"}, []int{0, 1, 2, 3}, []string{"2:0", "2:1"}, true},
		{"ALL any case, rest ignored", []string{"1", "All", "bogus"}, []int{0, 1, 2, 3}, []string{"2:0", "2:1"}, true},
		{"indices in given order", []string{"3", "1"}, []int{3, 1}, nil, false},
		{"index is enumeration order not minor", []string{"0"}, []int{0}, nil, false},
		{"comma list in a token", []string{"1,3"}, []int{1, 3}, nil, false},
		{"empty items ignored", []string{"1,,3,"}, []int{1, 3}, nil, false},
		{"spaces trimmed", []string{" 1 , 3 "}, []int{1, 3}, nil, false},
		{"dedupe", []string{"1", "1", "GPU-11111111-2222-3333-4444-555555555555", "00000000:0a:00.0"}, []int{1}, nil, false},
		{"uuid any case", []string{"gpu-31111111-2222-3333-4444-555555555555"}, []int{3}, nil, false},
		{"bus id full", []string{"00000000:0A:00.0"}, []int{1}, nil, false},
		{"bus id lower, short", []string{"0:a:0.0"}, []int{1}, nil, false},
		{"bus id no domain", []string{"c1:00.0"}, []int{3}, nil, false},
		{"bus id extra leading zeros", []string{"0000000000:0A:00.0"}, []int{1}, nil, false},
		{"bus id 4-digit domain", []string{"0001:41:00.0"}, []int{2}, nil, false},
		{"mig uuid selects parent", []string{"MIG-bbbbbbbb-0000-0000-0000-000000000000"}, []int{2}, []string{"2:1"}, false},
		{"mig uuid any case", []string{"mig-AAAAAAAA-0000-0000-0000-000000000000"}, []int{2}, []string{"2:0"}, false},
		{"mig index", []string{"2:1", "2:0"}, []int{2}, []string{"2:1", "2:0"}, false},
		{"mig and parent dedupe", []string{"2", "2:0", "2:0"}, []int{2}, []string{"2:0"}, false},
		{"old mig form", []string{"MIG-GPU-21111111-2222-3333-4444-555555555555/2/0"}, []int{2}, []string{"2:1"}, false},
		{"mixed", []string{"3,2:1,0"}, []int{3, 2, 0}, []string{"2:1"}, false},
		{"leading zeros", []string{"003"}, []int{3}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Resolve(testDriver(), tt.tokens)
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tt.tokens, err)
			}
			gpus, migs := names(sel)
			if !slices.Equal(gpus, tt.gpus) || !slices.Equal(migs, tt.migs) || sel.All != tt.all {
				t.Errorf("Resolve(%q) = GPUs %v MIG %v all %v; want %v %v %v", tt.tokens, gpus, migs, sel.All, tt.gpus, tt.migs, tt.all)
			}
			if sel.Empty() != (len(tt.gpus) == 0) {
				t.Errorf("Empty() = %v", sel.Empty())
			}
		})
	}
}

func TestResolveMIGParent(t *testing.T) {
	sel, err := Resolve(testDriver(), []string{"2:1"})
	if err != nil {
		t.Fatal(err)
	}
	if m := sel.MIG[0]; m.Parent.Index != 2 || m.Parent.Minor != 3 || m.MIG.GI != 2 {
		t.Errorf("MIG = %+v", m)
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		token, reason string
	}{
		{"4", "index out of range: the host has 4 GPUs (indices 0-3)"},
		{"99999999999999999999999999", "index out of range"},
		{"-1", "negative index"},
		{"x", "want all, an index, a GPU or MIG UUID, a PCI bus id or gpu:mig"},
		{"none", "want all"},
		{"GPU-1111", "no GPU has this UUID (UUIDs must be given in full)"},
		{"GPU-01111111-2222-3333-4444-55555555555", "no GPU has this UUID"},
		{"MIG-cccccccc-0000-0000-0000-000000000000", "no MIG device has this UUID"},
		{"0:0", "GPU 0 has no MIG devices (MIG not supported)"},
		{"3:0", "GPU 3 has no MIG devices (MIG disabled)"},
		{"2:5", "GPU 2 has no MIG device 5"},
		{"9:0", "GPU index 9 out of range"},
		{"2:x", "want gpu:mig with two decimal indices"},
		{"1:2:3", "want gpu:mig"},
		{"00000000:0A:00.1", "PCI function 1: GPUs are named by function 0"},
		{"00000000:0B:00.0", "no GPU at this PCI bus id"},
		{"100000000:0A:00.0", `PCI domain "100000000": out of range`},
		{"00000000:100:00.0", `PCI bus "100": out of range`},
		{"zz:00.0", `PCI bus "zz": not hexadecimal`},
		{"1.5", "want a PCI bus id"},
		{"MIG-GPU-21111111-2222-3333-4444-555555555555/9/0", "GPU 2 has no MIG device with GPU instance 9"},
		{"MIG-GPU-21111111-2222-3333-4444-555555555555/x", "want MIG-GPU-<uuid>/<gi>/<ci>"},
		{"MIG-GPU-99999999-2222-3333-4444-555555555555/1/0", "no GPU has this UUID"},
		{"nvidia.com/gpu=0", "a CDI device name"},
	}
	for _, tt := range tests {
		_, err := Resolve(testDriver(), []string{"0", tt.token})
		var de *Error
		if !errors.As(err, &de) {
			t.Errorf("Resolve(%q) = %v, want *Error", tt.token, err)
			continue
		}
		if de.Token != tt.token {
			t.Errorf("Token = %q, want %q", de.Token, tt.token)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, tt.token+": unknown device") || !strings.Contains(msg, tt.reason) {
			t.Errorf("Resolve(%q) = %q, want reason %q", tt.token, msg, tt.reason)
		}
		if !strings.Contains(msg, "host has GPUs 0-3: 0 GPU-01111111-2222-3333-4444-555555555555 (00000000:07:00.0), 1 GPU-") ||
			!strings.Contains(msg, "MIG 2:1 MIG-bbbbbbbb-0000-0000-0000-000000000000") {
			t.Errorf("Resolve(%q) = %q, want a hint listing the GPUs", tt.token, msg)
		}
	}
}

// TestErrorEcho: a token with a newline (NVIDIA_VISIBLE_DEVICES=$'0\n…')
// cannot forge a second log line, and a huge token gives a short message.
func TestErrorEcho(t *testing.T) {
	tests := []struct {
		token, wantPrefix string
	}{
		{"0\nlevel=error msg=forged", `0\nlevel=error msg=forged: unknown device`},
		{"MIG-GPU-21111111-2222-3333-4444-555555555555/9\r\n/0", `MIG-GPU-21111111-2222-3333-4444-555555555555/9\r\n/0: unknown device`},
		{strings.Repeat("x", 30000), strings.Repeat("x", 128) + "… (30000 bytes): unknown device"},
	}
	for _, tt := range tests {
		_, err := Resolve(testDriver(), []string{tt.token})
		msg := err.Error()
		if !strings.HasPrefix(msg, tt.wantPrefix) || strings.ContainsAny(msg, "\n\r") || len(msg) > 2000 {
			t.Errorf("Resolve(%.40q) = %.300q (%d bytes), want one short line starting %.200q", tt.token, msg, len(msg), tt.wantPrefix)
		}
	}
	ne := &NoGPUError{Request: "0\n" + strings.Repeat("1,", 20000)}
	if msg := ne.Error(); strings.ContainsAny(msg, "\n") || len(msg) > 400 {
		t.Errorf("NoGPUError = %.300q (%d bytes)", msg, len(msg))
	}
}

func TestResolveNoGPU(t *testing.T) {
	for _, d := range []*discover.Driver{nil, {Version: "535.261.03"}} {
		if sel, err := Resolve(d, nil); err != nil || !sel.Empty() {
			t.Errorf("no tokens: %v %v", sel, err)
		}
		for _, tok := range []string{"0", "all"} {
			_, err := Resolve(d, []string{tok})
			var ne *NoGPUError
			if !errors.As(err, &ne) {
				t.Fatalf("Resolve(%q) = %v, want *NoGPUError", tok, err)
			}
			want := fmt.Sprintf("no NVIDIA GPU found on this host but NVIDIA_VISIBLE_DEVICES asks for %q", tok)
			if err.Error() != want {
				t.Errorf("got %q, want %q", err, want)
			}
		}
	}
	ne := &NoGPUError{Request: "0", Source: "--device"}
	if !strings.Contains(ne.Error(), "but --device asks for") {
		t.Error(ne.Error())
	}
}

func TestHint(t *testing.T) {
	d := &discover.Driver{}
	for i := range 20 {
		d.GPUs = append(d.GPUs, discover.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), BusID: "b"})
	}
	h := Hint(d)
	if !strings.HasPrefix(h, "host has GPUs 0-19: 0 GPU-0 (b), ") || !strings.HasSuffix(h, ", … (4 more)") {
		t.Errorf("Hint = %q", h)
	}
	if h := Hint(&discover.Driver{GPUs: d.GPUs[:1]}); h != "host has GPU 0: 0 GPU-0 (b)" {
		t.Errorf("Hint = %q", h)
	}
}

func TestSplit(t *testing.T) {
	if got := Split(" 0, ,GPU-x,,"); !slices.Equal(got, []string{"0", "GPU-x"}) {
		t.Errorf("Split = %q", got)
	}
}

func BenchmarkResolve(b *testing.B) {
	d := testDriver()
	tokens := []string{"GPU-31111111-2222-3333-4444-555555555555,1,2:1,00000000:07:00.0"}
	for b.Loop() {
		if _, err := Resolve(d, tokens); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFacts(t *testing.T) {
	d := testDriver()
	d.CUDAVersion = "12.2"
	d.GPUs[2].Arch, d.GPUs[2].Brand = "8.0", "Tesla"
	sel, err := Resolve(d, []string{"2:1"})
	if err != nil {
		t.Fatal(err)
	}
	f := sel.Facts(d)
	want := requirements.Facts{CUDA: "12.2", Driver: "535.261.03", Devices: []requirements.DeviceFacts{
		{Index: "2", UUID: "GPU-21111111-2222-3333-4444-555555555555", Arch: "8.0", Brand: "Tesla"},
		{Index: "2:1", UUID: "MIG-bbbbbbbb-0000-0000-0000-000000000000", Arch: "8.0", Brand: "Tesla"},
	}}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Facts = %+v", f)
	}
	arch, err := requirements.Parse("arch>=9.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := requirements.Check([]requirements.Expr{arch}, f); err == nil || !strings.Contains(err.Error(), "GPU 2 (GPU-2") {
		t.Errorf("Check = %v", err)
	}
	if f := (Selection{}).Facts(nil); len(f.Devices) != 0 || f.CUDA != "" {
		t.Errorf("empty Facts = %+v", f)
	}
}
