package procfs

import (
	"fmt"
	"strings"
	"testing"
)

// realMIGMinors returns a mig-minors file laid out as the driver writes
// it: config, monitor, then for each of 32 GPUs 15 GPU instances with 8
// compute instances each — 4,322 lines, as on a real H100 host.
func realMIGMinors() string {
	var b strings.Builder
	b.WriteString("config 1\nmonitor 2\n")
	minor := 3
	for gpu := range 32 {
		for gi := range 15 {
			fmt.Fprintf(&b, "%s %d\n", MIGGIKey(gpu, gi), minor)
			minor++
			for ci := range 8 {
				fmt.Fprintf(&b, "%s %d\n", MIGCIKey(gpu, gi, ci), minor)
				minor++
			}
		}
	}
	return b.String()
}

func TestRealSizeMIGMinors(t *testing.T) {
	data := realMIGMinors()
	if n := strings.Count(data, "\n"); n != 4322 {
		t.Fatalf("%d lines", n)
	}
	m, err := ParseMIGMinors([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 4322 || m[MIGGIKey(0, 0)] != 3 || m[MIGCIKey(0, 0, 7)] != 11 || m[MIGGIKey(31, 14)] != 4314 {
		t.Errorf("got %d entries, gpu0/gi0 %d, gpu0/gi0/ci7 %d, gpu31/gi14 %d",
			len(m), m[MIGGIKey(0, 0)], m[MIGCIKey(0, 0, 7)], m[MIGGIKey(31, 14)])
	}
}

func BenchmarkParseMIGMinors(b *testing.B) {
	data := []byte(realMIGMinors())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMIGMinors(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseGPUInformation(b *testing.B) {
	data := []byte(h100Information)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseGPUInformation(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseDevices(b *testing.B) {
	data := []byte(procDevices)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDevices(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseVersion(b *testing.B) {
	data := []byte(versionOpen)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseVersion(data); err != nil {
			b.Fatal(err)
		}
	}
}
