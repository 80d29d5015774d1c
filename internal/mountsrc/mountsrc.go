// Package mountsrc opens the host side of a container's bind mounts (each a
// rootfs.Source: a checked host object and its detached clone) in batches
// sized to the process's descriptor table, for a caller that attaches them
// in another mount namespace: the --gpus hook's configure and the runtime's
// work in a created container.
//
// A process's descriptor table starts with room for 64 descriptors. The
// threads of a Go process share it, and each time it grows past 64, 128,
// ... the kernel waits for an RCU grace period (11–12 ms on a 16-vCPU VM,
// docs/benchmarks.md). So sources are opened in batches, each attached
// before the next is opened, sized to what is open at the time (fdTable
// less what is open less fdRoom, the room an attachment's temporaries
// take); a batch is cut short (its unattached sources closed, to be opened
// again) when the directories the journal keeps for new mount points have
// eaten that room. Never fewer than MinBatch.
package mountsrc

import (
	"os"

	"github.com/nctk/nctk/internal/plan"
	"github.com/nctk/nctk/internal/rootfs"
)

// KindOf is the rootfs kind of a plan mount's source; an unknown kind is
// 0, which rootfs.OpenSource refuses.
func KindOf(k plan.MountKind) rootfs.Kind {
	switch k {
	case plan.KindFile:
		return rootfs.KindFile
	case plan.KindDir:
		return rootfs.KindDir
	case plan.KindSocket:
		return rootfs.KindSocket
	}
	return 0
}

const (
	fdTable = 64
	fdRoom  = 12
	// MinBatch is the fewest sources a batch opens.
	MinBatch = 4
	// MaxBatch is the most sources a batch opens.
	MaxBatch = fdTable - fdRoom
)

// Opener opens and checks one source on the host.
type Opener func() (*rootfs.Source, error)

// Batches hands out the sources of its openers, opening them batch by batch.
type Batches struct {
	open []Opener
	// sources are nil where not opened yet (openBatch) or closed.
	sources []*rootfs.Source
	// batchOpen is how many descriptors were open once the current batch
	// was, batchKept how many directories the journal kept then.
	batchOpen, batchKept int
}

// Open opens the first batch of open's sources, in the caller's (the
// host's) mount namespace. Call it last among what holds descriptors until
// the sources are attached: the batch is sized to what is open. Close the
// result.
func Open(open []Opener) (*Batches, error) {
	b := &Batches{open: open, sources: make([]*rootfs.Source, len(open))}
	if len(open) == 0 {
		return b, nil
	}
	if err := b.openBatch(0, 0); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Len is the number of sources.
func (b *Batches) Len() int {
	if b == nil {
		return 0
	}
	return len(b.sources)
}

// Close closes every source still open.
func (b *Batches) Close() {
	if b == nil {
		return
	}
	for i, s := range b.sources {
		s.Close()
		b.sources[i] = nil
	}
}

// openDescriptors counts this process's open descriptors (fdTable when
// /proc/self/fd cannot be read: then batches are MinBatch).
func openDescriptors() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fdTable
	}
	return len(ents)
}

// openBatch opens the next batch of sources, from index i on; kept is how
// many directories the journal holds then.
func (b *Batches) openBatch(i, kept int) error {
	open := openDescriptors()
	end := min(i+max(fdTable-fdRoom-open, MinBatch), len(b.sources))
	// Each source holds one descriptor (its clone, or its path where there
	// is no clone).
	b.batchOpen, b.batchKept = open+end-i, kept
	for ; i < end; i++ {
		s, err := b.open[i]()
		if err != nil {
			return err
		}
		b.sources[i] = s
	}
	return nil
}

// cutBatch closes the current batch's sources from i on when the
// directories r's journal has kept since it was opened have eaten the room
// the batch was sized with; not a batch of MinBatch opened without room
// (and so never at a batch's first source, before the journal has kept
// anything since).
func (b *Batches) cutBatch(i int, r *rootfs.Root) {
	limit := fdTable - fdRoom
	if b.batchOpen > limit || b.batchOpen+r.KeptDirs()-b.batchKept <= limit {
		return
	}
	for j := i; j < len(b.sources) && b.sources[j] != nil; j++ {
		b.sources[j].Close()
		b.sources[j] = nil
	}
}

// Source is the i-th source, to be attached in r, opened with a batch
// after it (on the host, through host: it runs its function in the host's
// mount namespace) when it was not yet; the earlier ones, attached by
// then, are closed. When the directories r's journal has kept since the
// batch was opened leave less than fdRoom, the batch's unattached sources
// are closed and opened again in a batch sized to what is open now.
func (b *Batches) Source(i int, r *rootfs.Root, host func(func() error) error) (*rootfs.Source, error) {
	if b.sources[i] != nil {
		b.cutBatch(i, r)
	}
	if b.sources[i] == nil {
		for j, s := range b.sources[:i] {
			s.Close()
			b.sources[j] = nil
		}
		kept := r.KeptDirs()
		if err := host(func() error { return b.openBatch(i, kept) }); err != nil {
			return nil, err
		}
	}
	return b.sources[i], nil
}
