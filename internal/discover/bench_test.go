package discover

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/caps"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ldcache"
)

// cpuTime is the process's user+system CPU time: on a loaded machine it is
// the figure to compare, wall time includes waiting for a CPU.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// padCache appends filler entries (other libraries of the system, as a big
// host's cache has) until the cache holds n entries; the driver's own
// entries stay where they are.
func padCache(entries []ldcache.Entry, n int) []ldcache.Entry {
	out := append([]ldcache.Entry(nil), entries...)
	for i := 0; len(out) < n; i++ {
		out = append(out, ldcache.Entry{
			Key:   fmt.Sprintf("libfiller%06d.so.1", i),
			Value: fmt.Sprintf("/usr/lib/x86_64-linux-gnu/libfiller%06d.so.1", i),
			Flags: ldcache.FlagELFLibc6 | ldcache.ArchX8664,
		})
	}
	return out
}

// benchRoot builds a fixture root (multiarch layout, real 535 packages,
// compat32, sockets, firmware) with gpus GPUs and pads its ld.so.cache
// (written by ldconfig) to cacheSize entries.
func benchRoot(b *testing.B, gpus, cacheSize int) (*fixture.Root, int) {
	r := fixture.Build(b, fixture.Spec{Layout: fixture.Multiarch, GPUs: gpus, Compat32: true, IPC: true, Firmware: true})
	cacheData, err := os.ReadFile(r.HostPath(r.LDCache))
	if err != nil {
		b.Fatal(err)
	}
	c, err := ldcache.Parse(cacheData)
	if err != nil {
		b.Fatal(err)
	}
	entries := padCache(c.Entries, cacheSize)
	if err := os.WriteFile(r.HostPath(r.LDCache), encodeCache(entries), 0o644); err != nil {
		b.Fatal(err)
	}
	return r, len(entries)
}

// BenchmarkDiscover measures one Discover call (no driver probe) against
// fixture roots with 1, 8 and 64 GPUs and ld.so.caches of 100 to 100,000
// entries (the driver's own entries first, then filler).
// See docs/benchmarks.md, section "Discovery", for numbers.
func BenchmarkDiscover(b *testing.B) {
	for _, gpus := range []int{1, 8, 64} {
		for _, size := range []int{100, 1000, 10000, 100000} {
			if gpus != 1 && size != 1000 {
				continue // GPU scaling at a typical cache size; cache scaling with one GPU
			}
			b.Run(fmt.Sprintf("gpus=%d/cache=%d", gpus, size), func(b *testing.B) {
				r, n := benchRoot(b, gpus, size)
				if n != size {
					b.Logf("cache has %d entries (the driver's own exceed %d)", n, size)
				}
				o := Options{Root: r.Path}
				d, err := Discover(o)
				if err != nil {
					b.Fatal(err)
				}
				if len(d.GPUs) != gpus || len(d.Libraries) < 20 {
					b.Fatalf("root gave %d GPUs and %d libraries", len(d.GPUs), len(d.Libraries))
				}
				timeDiscover(b, o)
			})
		}
	}
}

// BenchmarkDiscoverCaps measures the Discover call the legacy runtime and the
// --gpus hook make for a default container: the caps it asks for
// (utility,compute) limit the libraries and binaries looked up; 1 and 8
// GPUs, a cache of 1,000 entries.
func BenchmarkDiscoverCaps(b *testing.B) {
	for _, gpus := range []int{1, 8} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			r, _ := benchRoot(b, gpus, 1000)
			o := Options{Root: r.Path, Caps: caps.Default()}
			if d, err := Discover(o); err != nil || len(d.GPUs) != gpus {
				b.Fatalf("root gave %v, %v; want %d GPUs", d, err, gpus)
			}
			timeDiscover(b, o)
		})
	}
}

// timeDiscover times Discover(o), reporting its allocations and CPU time.
func timeDiscover(b *testing.B, o Options) {
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := Discover(o); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkVerify measures the check planner.Run makes after building a
// plan (Driver.Verify): the pinned root, the kernel module's version and
// the host files of a utility,compute container with 8 GPUs. See
// docs/benchmarks.md, section "Discovery".
func BenchmarkVerify(b *testing.B) {
	r, _ := benchRoot(b, 8, 1000)
	d, err := Discover(Options{Root: r.Path, Caps: caps.Default()})
	if err != nil {
		b.Fatal(err)
	}
	paths := hostPaths(d)
	if len(paths) < 20 {
		b.Fatalf("only %d paths", len(paths))
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if err := d.Verify(paths); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(paths)), "paths")
}
