package discover

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/caps"
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
			Flags: flags64,
		})
	}
	return out
}

// benchRoot builds a root shaped like a full driver installation: every
// library of NVIDIA's lists in 64-bit (and the compute/utility ones in
// 32-bit), each with its SONAME link and development link in the cache,
// the usual binaries, firmware, control nodes, gpus GPUs with their nodes,
// and the ld.so.cache padded to cacheSize entries.
func benchRoot(b *testing.B, gpus, cacheSize int) *miniRoot {
	const v = "535.309.01"
	m := newMiniRoot(b)
	m.driver(v)
	for _, g := range caps.LibraryGroupOrder() {
		for _, p := range caps.Libraries(g) {
			name := p[:len(p)-len(".so")]
			m.lib("/usr/lib/x86_64-linux-gnu/nvidia/current", name, v, 64)
			m.cache = append(m.cache, ldcache.Entry{Key: name + ".so", Value: "/usr/lib/x86_64-linux-gnu/nvidia/current/" + name + ".so.1", Flags: flags64})
			if g == caps.Compute || g == caps.Utility {
				m.lib("/usr/lib/i386-linux-gnu/nvidia/current", name, v, 32)
			}
		}
	}
	m.cache = padCache(m.cache, cacheSize)
	m.writeCache()
	for _, bin := range []string{"nvidia-smi", "nvidia-debugdump"} {
		m.elf("/usr/lib/nvidia/current/"+bin, 64)
	}
	for _, bin := range []string{"nvidia-persistenced", "nvidia-cuda-mps-control"} {
		m.elf("/usr/bin/"+bin, 64)
	}
	m.elf("/usr/sbin/nvidia-cuda-mps-server", 64)
	m.file("/lib/firmware/nvidia/"+v+"/gsp_ga10x.bin", "fw", 0o644)
	m.file("/lib/firmware/nvidia/"+v+"/gsp_tu10x.bin", "fw", 0o644)
	m.chardev("/dev/nvidiactl", 195, 255)
	m.chardev("/dev/nvidia-uvm", 238, 0)
	m.chardev("/dev/nvidia-uvm-tools", 238, 1)
	for i := 0; i < gpus; i++ {
		m.gpu(fmt.Sprintf("0000:%02x:00.0", i+1), i, fmt.Sprintf("GPU-00000000-0000-0000-0000-%012x", i))
		m.chardev(fmt.Sprintf("/dev/nvidia%d", i), 195, uint32(i))
	}
	return m
}

// BenchmarkDiscover measures one Discover call (no driver probe) against
// roots with 1, 8 and 64 GPUs and ld.so.caches of 100 to 100,000 entries.
// See docs/benchmarks.md, section "Discovery", for numbers.
func BenchmarkDiscover(b *testing.B) {
	for _, gpus := range []int{1, 8, 64} {
		for _, size := range []int{100, 1000, 10000, 100000} {
			if gpus != 1 && size != 1000 {
				continue // GPU scaling at a typical cache size; cache scaling with one GPU
			}
			b.Run(fmt.Sprintf("gpus=%d/cache=%d", gpus, size), func(b *testing.B) {
				m := benchRoot(b, gpus, size)
				d, err := m.discover(nil)
				if err != nil {
					b.Fatal(err)
				}
				if len(d.GPUs) != gpus || len(d.Libraries) < 40 {
					b.Fatalf("root gave %d GPUs and %d libraries", len(d.GPUs), len(d.Libraries))
				}
				b.ReportAllocs()
				cpu0 := cpuTime()
				for b.Loop() {
					if _, err := m.discover(nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
