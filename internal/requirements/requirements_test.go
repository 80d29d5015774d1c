package requirements

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// cudaImageRequire builds an NVIDIA_REQUIRE_CUDA value the way NVIDIA's CUDA
// images spell it: the CUDA minimum, then brand/driver alternatives for each
// older driver branch that the image supports through forward
// compatibility.
func cudaImageRequire(cuda string, branches []int) string {
	brands := []string{"unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps", "vpc", "vcs", "vws", "cloudgaming", "geforce", "geforcertx", "titan", "titanrtx"}
	parts := []string{"cuda>=" + cuda}
	for _, br := range branches {
		for _, b := range brands {
			parts = append(parts, fmt.Sprintf("brand=%s,driver>=%d,driver<%d", b, br, br+1))
		}
	}
	return strings.Join(parts, " ")
}

// CUDA 12.2 and 13.0 image requirements (long brand expressions).
var (
	require122 = cudaImageRequire("12.2", []int{470, 525})
	require130 = cudaImageRequire("13.0", []int{535, 550, 570})
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want string
		alts int
	}{
		{"cuda>=12.1", "cuda>=12.1", 1},
		{"CUDA>=12.1", "cuda>=12.1", 1},
		{"cuda>=12.1 brand=tesla,driver>=470,driver<471", "cuda>=12.1 brand=tesla,driver>=470,driver<471", 2},
		{"  arch=8.0   arch=9.0\t", "arch=8.0 arch=9.0", 2},
		{"Brand!=GeForce", "brand!=GeForce", 1},
		{"driver<=580.159.04", "driver<=580.159.04", 1},
		{"arch>7.5", "arch>7.5", 1},
		{"driver!=1", "driver!=1", 1},
		{require130, require130, 1 + 16*3},
	}
	for _, tt := range tests {
		e, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got := e.String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		if len(e.Alternatives) != tt.alts {
			t.Errorf("Parse(%q): %d alternatives, want %d", tt.in, len(e.Alternatives), tt.alts)
		}
		if e.Source != tt.in {
			t.Errorf("Parse(%q).Source = %q", tt.in, e.Source)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in, wantSub string
	}{
		{"", "empty expression"},
		{"   ", "empty expression"},
		{"cuda>=abc", `invalid expression "cuda>=abc": "cuda>=abc": cuda version "abc" must be numbers`},
		{"cuda==12", `unknown operator "=="`},
		{"cuda=>12", `unknown operator "=>"`},
		{"cuda<>12", `unknown operator "<>"`},
		{"cuda", "no operator"},
		{">=12", "missing key"},
		{"cuda>=", "missing value"},
		{"gpu>=1", `unknown key "gpu"`},
		{"brand>=tesla", "brand takes only = and !="},
		{"cuda>=12,,driver>=1", "empty condition"},
		{"cuda>=12,", "empty condition"},
		{",cuda>=12", "empty condition"},
		{"cuda>=12..1", "must be numbers"},
		{"cuda>=.12", "must be numbers"},
		{"cuda>=12.", "must be numbers"},
		{"cuda>=-1", "must be numbers"},
		{"driver>=1e3", "must be numbers"},
		{"cuda>=12 brand", "no operator"},
		{"cuda>=１２", "must be numbers"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) = nil error, want %q", tt.in, tt.wantSub)
			continue
		}
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) error %T, want *SyntaxError", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.wantSub) {
			t.Errorf("Parse(%q) = %q, want it to contain %q", tt.in, err, tt.wantSub)
		}
		// The phase prefix ("requirement error: ") is the caller's.
		if !strings.HasPrefix(err.Error(), "invalid expression ") {
			t.Errorf("Parse(%q) = %q: want the message without a phase prefix", tt.in, err)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"11", "11.0", 0},
		{"11.0.0", "11", 0},
		{"12.4", "12.4.1", -1},
		{"12.4.1", "12.4", 1},
		{"13.0", "12.9", 1},
		{"12.10", "12.9", 1},
		{"580.159.04", "580.159.4", 0},
		{"535", "536", -1},
		{"0009", "9", 0},
		{"99999999999999999999999", "99999999999999999999998", 1},
		{"1.99999999999999999999999", "2", -1},
	}
	for _, tt := range tests {
		got, ok := CompareVersions(tt.a, tt.b)
		if !ok || got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d", tt.a, tt.b, got, ok, tt.want)
		}
	}
	for _, bad := range [][2]string{{"", "1"}, {"1", "a"}, {"1..2", "1"}, {"1.", "1"}} {
		if _, ok := CompareVersions(bad[0], bad[1]); ok {
			t.Errorf("CompareVersions(%q, %q): ok, want not ok", bad[0], bad[1])
		}
	}
}

// h100 is the H100 host of the reference notes.
var h100 = Facts{
	CUDA:   "13.0",
	Driver: "580.159.04",
	Devices: []DeviceFacts{
		{Index: "0", UUID: "GPU-8c1c8a5b-62c8-4a39-5a9e-0f1d6e1f3b2a", Arch: "9.0", Brand: "Nvidia"},
	},
}

// parsed parses requirement expressions, failing the test on a syntax
// error.
func parsed(tb testing.TB, reqs ...string) []Expr {
	tb.Helper()
	out := make([]Expr, len(reqs))
	for i, r := range reqs {
		e, err := Parse(r)
		if err != nil {
			tb.Fatalf("Parse(%q): %v", r, err)
		}
		out[i] = e
	}
	return out
}

func TestEvaluate(t *testing.T) {
	twoGPUs := Facts{CUDA: "12.2", Driver: "535.261.03", Devices: []DeviceFacts{
		{Index: "0", UUID: "GPU-a", Arch: "8.0", Brand: "Tesla"},
		{Index: "1", UUID: "GPU-b", Arch: "7.5", Brand: "GeForce"},
	}}
	noDev := Facts{CUDA: "12.2", Driver: "535.261.03"}
	unknown := Facts{Devices: []DeviceFacts{{Index: "0"}}}
	tests := []struct {
		name  string
		reqs  []string
		facts Facts
		ok    bool
		notes int
	}{
		{"none", nil, h100, true, 0},
		{"cuda ok", []string{"cuda>=13.0"}, h100, true, 0},
		{"cuda equal with zero", []string{"cuda>=13"}, h100, true, 0},
		{"cuda too new", []string{"cuda>=13.1"}, h100, false, 0},
		{"cuda 12.4 >= 12.4.1 false", []string{"cuda>=12.4.1"}, Facts{CUDA: "12.4"}, false, 0},
		{"image 13.0 on H100", []string{require130}, h100, true, 0},
		{"image 12.2 on H100", []string{require122}, h100, true, 0},
		{"image 13.0 on 535 tesla through brand alternative", []string{require130}, Facts{CUDA: "12.2", Driver: "535.261.03", Devices: []DeviceFacts{{Index: "0", Brand: "Tesla", Arch: "8.0"}}}, true, 0},
		{"image 13.0 on 535 brand case-insensitive", []string{require130}, Facts{CUDA: "12.2", Driver: "535.261.03", Devices: []DeviceFacts{{Index: "0", Brand: "TESLA", Arch: "8.0"}}}, true, 0},
		{"image 13.0 on 545 tesla", []string{require130}, Facts{CUDA: "12.3", Driver: "545.23.08", Devices: []DeviceFacts{{Index: "0", Brand: "Tesla", Arch: "8.0"}}}, false, 0},
		{"several requirements ANDed", []string{"cuda>=12.0", "driver>=600"}, h100, false, 0},
		{"arch every device", []string{"arch>=8.0"}, twoGPUs, false, 0},
		{"arch or", []string{"arch=8.0 arch=7.5"}, twoGPUs, true, 0},
		{"brand every device", []string{"brand!=geforce"}, twoGPUs, false, 0},
		{"no device: arch and brand true", []string{"arch>=99,brand=quadro"}, noDev, true, 0},
		{"no device: driver still checked", []string{"arch>=99,driver>=600"}, noDev, false, 0},
		{"unknown values true with notes", []string{"driver>=999", "arch>=9", "brand=tesla"}, unknown, true, 3},
		{"unknown CUDA fails closed", []string{"cuda>=12.0"}, unknown, false, 0},
		{"unknown CUDA fails closed for <", []string{"cuda<99"}, Facts{Driver: "535.261.03"}, false, 0},
		{"CUDA not a version fails closed", []string{"cuda>=12.0"}, Facts{CUDA: "n/a", Driver: "535.261.03"}, false, 0},
		{"unknown CUDA, another alternative holds", []string{"cuda>=12.0 driver>=500"}, Facts{Driver: "535.261.03"}, true, 0},
		{"driver with suffix compared on numbers", []string{"driver>=580"}, Facts{Driver: "580.65.06-open"}, true, 0},
		{"driver lt", []string{"driver<536"}, Facts{Driver: "535.261.03"}, true, 0},
		{"driver eq trailing zero", []string{"driver=535.0"}, Facts{Driver: "535"}, true, 0},
		{"driver ne", []string{"driver!=535"}, Facts{Driver: "535"}, false, 0},
		{"cuda gt", []string{"cuda>12.2"}, Facts{CUDA: "12.2"}, false, 0},
		{"cuda le", []string{"cuda<=12.2"}, Facts{CUDA: "12.2"}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := parsed(t, tt.reqs...)
			res, err := Evaluate(reqs, tt.facts)
			if tt.ok != (err == nil) {
				t.Fatalf("Evaluate(%q) = %v, want ok=%v", tt.reqs, err, tt.ok)
			}
			var u *UnsatisfiedError
			if err != nil && !errors.As(err, &u) {
				t.Fatalf("error %T is not *UnsatisfiedError", err)
			}
			if len(res.Notes) != tt.notes {
				t.Errorf("notes = %q, want %d", res.Notes, tt.notes)
			}
			if err := Check(reqs, tt.facts); tt.ok != (err == nil) {
				t.Errorf("Check disagrees with Evaluate: %v", err)
			}
		})
	}
}

func TestUnsatisfiedMessage(t *testing.T) {
	err := Check(parsed(t, "cuda>=13.1"), h100)
	if err == nil {
		t.Fatal("want error")
	}
	msg := err.Error()
	for _, want := range []string{
		// NVIDIA's text, which scripts grep for.
		"unsatisfied condition: cuda>=13.1, please update your driver to a newer version, or use an earlier cuda container",
		// The condition that failed and the host's values.
		"or use an earlier cuda container (the image needs CUDA >= 13.1, but the host driver 580.159.04 supports CUDA 13.0)",
		"update the host driver, use an image built for an older CUDA, or set NVIDIA_DISABLE_REQUIRE=true to skip this check",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message\n%s\nlacks\n%s", msg, want)
		}
	}
	var u *UnsatisfiedError
	if !errors.As(err, &u) || u.Expr.Source != "cuda>=13.1" || len(u.Failures) != 1 || u.Failures[0].Host != "13.0" {
		t.Errorf("UnsatisfiedError = %+v", u)
	}
}

func TestUnsatisfiedMessageAlternatives(t *testing.T) {
	req := cudaImageRequire("13.1", []int{535})
	err := Check(parsed(t, req), h100)
	if err == nil {
		t.Fatal("want error")
	}
	msg := err.Error()
	for _, want := range []string{
		"unsatisfied condition: cuda>=13.1, please update your driver",
		"(the image needs CUDA >= 13.1, but the host driver 580.159.04 supports CUDA 13.0)",
		"also tried 16 other alternatives, none holds:",
		"15 fail on brand= (unknown, grid, tesla, quadro, quadrortx, nvidiartx, vapps, vpc, …; GPU 0 (GPU-8c1c8a5b-62c8-4a39-5a9e-0f1d6e1f3b2a) has brand Nvidia)",
		"1 fails on driver< (536; the host driver is 580.159.04)",
		"host: driver 580.159.04, CUDA 13.0, GPU 0 (GPU-8c1c8a5b-62c8-4a39-5a9e-0f1d6e1f3b2a) brand Nvidia arch 9.0",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message\n%s\nlacks\n%s", msg, want)
		}
	}
}

// Brand and arch are read only when a requirement tests them: unread,
// the host line leaves them out rather than calling them unknown.
func TestUnsatisfiedMessageUnreadDeviceFacts(t *testing.T) {
	f := h100
	f.Devices = []DeviceFacts{{Index: "0", UUID: "GPU-8c1c8a5b-62c8-4a39-5a9e-0f1d6e1f3b2a"}}
	err := Check(parsed(t, "cuda>=99.0"), f)
	if err == nil {
		t.Fatal("want error")
	}
	msg := err.Error()
	if want := "host: driver 580.159.04, CUDA 13.0, GPU 0 (GPU-8c1c8a5b-62c8-4a39-5a9e-0f1d6e1f3b2a);"; !strings.Contains(msg, want) {
		t.Errorf("message\n%s\nlacks\n%s", msg, want)
	}
	if strings.Contains(msg, "unknown") {
		t.Errorf("message names unread facts unknown: %s", msg)
	}
}

func TestUnsatisfiedMessageByKey(t *testing.T) {
	tests := []struct {
		req  string
		want []string
		nv   string
	}{
		{"driver>=600", []string{"unsatisfied condition: driver>=600 (the image needs driver >= 600, but the host driver is 580.159.04)", "update the host driver"}, "unsatisfied condition: driver>=600 ("},
		{"arch>=10.0", []string{"(the image needs compute capability (arch) >= 10.0, but GPU 0 (GPU-8c1c8a5b-62c8-4a39-5a9e-0f1d6e1f3b2a) has 9.0)", "run the container on a GPU the image supports"}, ""},
		{"brand=tesla", []string{"(the image needs brand tesla, but GPU 0 (GPU-8c1c8a5b-62c8-4a39-5a9e-0f1d6e1f3b2a) is Nvidia)"}, ""},
		{"brand!=nvidia", []string{"the image does not run on brand nvidia, and GPU 0"}, ""},
		{"cuda<13", []string{"the image needs CUDA < 13, but the host driver 580.159.04 supports CUDA 13.0", "use an image whose requirements this host meets"}, ""},
		// NVIDIA quotes the first alternative even when another failed.
		{"driver>=500,cuda>=14", []string{"unsatisfied condition: driver>=500,cuda>=14 (cuda>=14 fails: the image needs CUDA >= 14"}, ""},
	}
	for _, tt := range tests {
		err := Check(parsed(t, tt.req), h100)
		if err == nil {
			t.Errorf("%s: want error", tt.req)
			continue
		}
		for _, w := range append(tt.want, tt.nv) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: message\n%s\nlacks\n%s", tt.req, err, w)
			}
		}
		if strings.Contains(err.Error(), "please update your driver") {
			t.Errorf("%s: NVIDIA's cuda>= advice only follows a cuda>= first alternative: %s", tt.req, err)
		}
	}
}

func TestMIGDeviceName(t *testing.T) {
	f := Facts{CUDA: "12.2", Driver: "535.1", Devices: []DeviceFacts{{Index: "0:1", UUID: "MIG-x", Arch: "8.0", Brand: "Tesla"}}}
	err := Check(parsed(t, "arch>=9.0"), f)
	if err == nil || !strings.Contains(err.Error(), "MIG device 0:1 (MIG-x) has 8.0") {
		t.Errorf("got %v", err)
	}
}

// TestUnsatisfiedNoPrefix: the error text is the message alone; the
// "requirement error: " prefix is added once, by the caller's phase error.
func TestUnsatisfiedNoPrefix(t *testing.T) {
	err := Check(parsed(t, "cuda>=13.1"), h100)
	if err == nil || !strings.HasPrefix(err.Error(), "unsatisfied condition: cuda>=13.1") {
		t.Errorf("Check = %v, want the message without a phase prefix", err)
	}
}

func BenchmarkParseCUDA13(b *testing.B) {
	for b.Loop() {
		if _, err := Parse(require130); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckCUDA13(b *testing.B) {
	reqs := parsed(b, require130)
	for b.Loop() {
		if err := Check(reqs, h100); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckUnsatisfied(b *testing.B) {
	reqs := parsed(b, cudaImageRequire("13.1", []int{535, 550, 570}))
	for b.Loop() {
		if err := Check(reqs, h100); err == nil {
			b.Fatal("want error")
		} else {
			_ = err.Error()
		}
	}
}

// TestUnparsableCUDAMessages: a host CUDA value that is not a version is
// named as such, and an unknown one reads as unknown in the summary of the
// other alternatives.
func TestUnparsableCUDAMessages(t *testing.T) {
	err := Check(parsed(t, "cuda>=13.0"), Facts{CUDA: "n/a", Driver: "535.261.03"})
	if want := `the host driver 535.261.03 reports CUDA version "n/a", which is not a version`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v lacks %q", err, want)
	}
	err = Check(parsed(t, "driver>=999 cuda>=13.0 cuda>=12.0"), Facts{Driver: "535.261.03"})
	if want := "2 fail on cuda>= (13.0, 12.0; the host driver's CUDA version is unknown)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v lacks %q", err, want)
	}
}

// TestUnknownCUDAMessage: a cuda requirement on a host whose CUDA version is
// unknown fails with an error that says so, why, and what to do.
func TestUnknownCUDAMessage(t *testing.T) {
	facts := Facts{Driver: "535.261.03", CUDAUnknown: "driver probe: nctk-driverprobe is missing"}
	err := Check(parsed(t, "cuda>=13.0"), facts)
	var u *UnsatisfiedError
	if !errors.As(err, &u) {
		t.Fatalf("Check = %v, want an unsatisfied requirement", err)
	}
	for _, want := range []string{
		"the image needs CUDA >= 13.0, but the CUDA version of the host driver 535.261.03 could not be determined: driver probe: nctk-driverprobe is missing",
		"CUDA unknown",
		"make the driver's CUDA version known",
		"NVIDIA_DISABLE_REQUIRE=true",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
