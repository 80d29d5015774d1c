// Package buildid reads the Go build ID an executable records in its ELF
// note (what `go tool buildid` prints). nctk's runtime uses it to recognise
// the nvidia-cdi-hook binary built with it (version.HookBuildID): a hook
// of that binary runs this same code, so the runtime may do its work
// itself instead of running it.
package buildid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nctk/nctk/internal/hostfile"
)

// ErrNone is returned for a file that is no ELF executable with a Go build
// ID note.
var ErrNone = errors.New("no Go build ID")

const (
	ptNote = 4
	// noteGoBuildID is the type of the Go linker's build ID note (name
	// "Go").
	noteGoBuildID = 4
	// maxNote bounds the bytes of one PT_NOTE segment read; maxPhdrs the
	// program headers.
	maxNote  = 4096
	maxPhdrs = 64
)

// maxExecutable bounds the file Read opens.
const maxExecutable = 1 << 30

// Read returns the Go build ID of the executable at path: a regular file
// (opened non-blocking and checked, hostfile's rules: a FIFO or device
// swapped in at path is refused, never waited on).
func Read(path string) (string, error) {
	fd, err := hostfile.OpenFD(path, maxExecutable)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	id, err := Parse(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}

// Parse reads the Go build ID note of the little-endian ELF64 object r:
// the ELF header, the program headers and the PT_NOTE segments (a few
// small reads). Anything else is ErrNone, wrapped with what was wrong.
func Parse(r io.ReaderAt) (string, error) {
	var eh [64]byte
	if _, err := r.ReadAt(eh[:], 0); err != nil {
		return "", fmt.Errorf("%w: ELF header: %v", ErrNone, err)
	}
	if string(eh[:4]) != "\x7fELF" || eh[4] != 2 || eh[5] != 1 {
		return "", fmt.Errorf("%w: not a little-endian ELF64 file", ErrNone)
	}
	le := binary.LittleEndian
	phoff, phentsize, phnum := le.Uint64(eh[32:]), uint64(le.Uint16(eh[54:])), uint64(le.Uint16(eh[56:]))
	if phentsize < 56 || phentsize > 256 || phnum > maxPhdrs || phoff > 1<<32 {
		return "", fmt.Errorf("%w: bad program header table", ErrNone)
	}
	ph := make([]byte, phentsize*phnum)
	if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
		return "", fmt.Errorf("%w: program headers: %v", ErrNone, err)
	}
	for i := range phnum {
		p := ph[i*phentsize:]
		if le.Uint32(p) != ptNote {
			continue
		}
		off, size := le.Uint64(p[8:]), le.Uint64(p[32:])
		if off > 1<<40 {
			continue
		}
		buf := make([]byte, min(size, maxNote))
		n, err := r.ReadAt(buf, int64(off))
		if err != nil && !(err == io.EOF && n > 0) {
			continue
		}
		if id, ok := goNote(buf[:n]); ok {
			return id, nil
		}
	}
	return "", ErrNone
}

// goNote finds the Go build ID note in a PT_NOTE segment's bytes: notes
// are namesz, descsz, type, the name and the description, each padded to
// four bytes.
func goNote(b []byte) (string, bool) {
	le := binary.LittleEndian
	for len(b) >= 12 {
		namesz, descsz, typ := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), le.Uint32(b[8:])
		nameEnd := 12 + align4(namesz)
		end := nameEnd + align4(descsz)
		if namesz > uint64(len(b)) || descsz > uint64(len(b)) || end > uint64(len(b)) {
			return "", false
		}
		if typ == noteGoBuildID && strings.TrimRight(string(b[12:12+namesz]), "\x00") == "Go" {
			return string(b[nameEnd : nameEnd+descsz]), true
		}
		b = b[end:]
	}
	return "", false
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }
