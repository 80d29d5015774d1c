package ldcache

import (
	"fmt"

	"github.com/nctk/nctk/internal/hostfile"
)

// Load reads and parses the cache file at path as the package's readers
// do (hostfile.Open: a FIFO or device refused at once, a file larger than
// MaxSize before anything is read); errors name the path. Production code
// reads caches through descriptors (discover, rootfs); the tests read
// files by name.
func Load(path string) (*Cache, error) {
	f, err := hostfile.Open(path, MaxSize)
	if err != nil {
		return nil, fmt.Errorf("ld.so.cache: %w", err)
	}
	defer f.Close()
	c, _, err := ReadFiltered(f, nil)
	if err != nil {
		return nil, fmt.Errorf("ld.so.cache %s: %w", path, err)
	}
	return c, nil
}
