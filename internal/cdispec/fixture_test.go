package cdispec

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/planner"
)

// TestGenerateGoldenFixtures generates the spec of every fixture layout
// (two GPUs, the second in MIG mode, compat32 libraries, IPC sockets, GSP
// firmware; no driver probe, which cannot work there) and compares it with testdata/<layout>.golden.yaml, the
// temporary root replaced by /DRIVER-ROOT. Each spec must validate and load
// through the CDI library's cache with every device name.
func TestGenerateGoldenFixtures(t *testing.T) {
	for _, layout := range fixture.Layouts() {
		t.Run(string(layout), func(t *testing.T) {
			r := fixture.Build(t, fixture.Spec{Layout: layout, GPUs: 2, MIG: true, Compat32: true, IPC: true, Firmware: true})
			job := planner.Job{Driver: discover.Options{Root: r.Path}}
			spec, err := Generate(context.Background(), job, Options{NoProbe: true,
				Hook: ocispec.HookConfig{Path: DefaultHookPath, LdconfigPath: "/sbin/ldconfig"}})
			if err != nil {
				t.Fatal(err)
			}
			if spec.Version != MaxCompatVersion {
				t.Errorf("cdiVersion %s, want %s", spec.Version, MaxCompatVersion)
			}
			data, err := Marshal(spec, FormatYAML)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, string(layout)+".golden.yaml", bytes.ReplaceAll(data, []byte(r.Path), []byte("/DRIVER-ROOT")))

			// Every GPU not in MIG mode is there by index and UUID, every
			// MIG device by index (MIG device UUIDs come from NVML only,
			// which a fixture root cannot load: no kernel driver).
			var want []string
			for _, g := range r.GPUs {
				if !g.MIGEnabled {
					want = append(want, itoa(g.Index), g.UUID)
				}
				for _, m := range g.MIG {
					want = append(want, itoa(g.Index)+":"+itoa(m.Index))
				}
			}
			want = append(want, AllDevice)
			for i, n := range want {
				want[i] = "nvidia.com/gpu=" + n
			}
			dir := t.TempDir()
			if err := WriteFile(dir+"/nvidia.yaml", data); err != nil {
				t.Fatal(err)
			}
			c, err := pkgcdi.NewCache(pkgcdi.WithSpecDirs(dir), pkgcdi.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if errs := c.GetErrors(); len(errs) > 0 {
				t.Fatalf("cache errors: %v", errs)
			}
			for _, n := range want {
				if c.GetDevice(n) == nil {
					t.Errorf("the cache has no device %s (has %q)", n, c.ListDevices())
				}
			}
			if got := len(c.ListDevices()); got != len(want) {
				t.Errorf("%d devices %q, want %d", got, c.ListDevices(), len(want))
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
