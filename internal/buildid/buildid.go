// Package buildid reads the Go build ID an executable records in its ELF
// note (what `go tool buildid` prints). nctk's runtime uses it to recognise
// the nvidia-cdi-hook binary built with it (version.HookBuildID): a hook
// of that binary runs this same code, so the runtime may do its work
// itself instead of running it.
package buildid

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/ldcache"
)

// ErrNone is returned for a file that is no ELF executable with a Go build
// ID note.
var ErrNone = errors.New("no Go build ID")

// noteGoBuildID is the type of the Go linker's build ID note (name "Go").
const noteGoBuildID = 4

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
	id, err := Parse(f, maxExecutable)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return id, nil
}

// Parse reads the Go build ID note of the ELF object r of at most size
// bytes (ldcache.FindNote: the ELF header, the program headers and the
// PT_NOTE segments, a few small reads). Anything else is ErrNone, wrapped
// with what was wrong.
func Parse(r io.ReaderAt, size int64) (string, error) {
	desc, found, err := ldcache.FindNote(r, size, "Go", noteGoBuildID)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNone, err)
	}
	if !found {
		return "", ErrNone
	}
	return string(desc), nil
}
