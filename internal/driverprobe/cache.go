package driverprobe

import (
	"fmt"

	"github.com/nctk/nctk/internal/runcache"
)

// cacheVersion changes whenever Result's meaning changes, so that results of
// an older nctk are not reused.
const cacheVersion = 1

// cacheKind names the probe's entries in the cache directory.
const cacheKind = "driverprobe"

// cache is the cache slot for one request.
type cache struct {
	dir *runcache.Dir
	key string
}

// openCache returns the cache slot for req in cfg's cache directory
// (Config.OpenCache), or nil and the reason the cache cannot be used.
func openCache(cfg Config, req Request) (*cache, string) {
	d, note := cfg.OpenCache()
	if d == nil {
		return nil, note
	}
	key, err := cacheKey(req)
	if err != nil {
		return nil, "not cached: " + err.Error()
	}
	return &cache{dir: d, key: key}, ""
}

// cacheKey hashes everything a result depends on.
func cacheKey(req Request) (string, error) {
	cuda, err := runcache.Identify(req.Libcuda)
	if err != nil {
		return "", fmt.Errorf("identify libcuda: %w", err)
	}
	k := struct {
		Version int              `json:"v"`
		Cuda    runcache.FileID  `json:"cuda"`
		NVML    *runcache.FileID `json:"nvml,omitempty"`
		Module  string           `json:"module"`
		Bus     []string         `json:"bus"`
		MIG     []string         `json:"mig,omitempty"`
	}{Version: cacheVersion, Cuda: cuda, Module: req.ModuleVersion, Bus: req.BusIDs, MIG: req.MIGLayout}
	if req.NVML != "" {
		n, err := runcache.Identify(req.NVML)
		if err != nil {
			return "", fmt.Errorf("identify NVML: %w", err)
		}
		k.NVML = &n
	}
	return runcache.Key(k)
}

func (c *cache) load() (*Result, bool) {
	var r Result
	if !c.dir.Load(cacheKind, c.key, &r) {
		return nil, false
	}
	return &r, true
}

// store writes the entry (runcache.Dir.Store: atomic, not synced).
func (c *cache) store(r *Result) error { return c.dir.Store(cacheKind, c.key, r) }
