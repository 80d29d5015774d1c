package driverprobe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/hostfile"
)

// cacheVersion changes whenever Result's meaning changes, so that results of
// an older nctk are not reused.
const cacheVersion = 1

// DefaultCacheDir returns where probe results are cached: /run/nctk for
// root, $XDG_RUNTIME_DIR/nctk for other users, "" (no cache) when neither
// applies. getenv is os.Getenv or an app.Env's Getenv.
func DefaultCacheDir(getenv func(string) string) string {
	if os.Geteuid() == 0 {
		return "/run/nctk"
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "nctk")
	}
	return ""
}

// cache is the cache file for one request.
type cache struct {
	path string
	key  string
}

// cacheEntry is what a cache file holds.
type cacheEntry struct {
	Version int     `json:"version"`
	Key     string  `json:"key"`
	Result  *Result `json:"result"`
}

// fileID identifies one version of a file.
type fileID struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
	Ino   uint64 `json:"ino"`
	Dev   uint64 `json:"dev"`
}

func identify(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{Path: path, Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.Ino, id.Dev = st.Ino, uint64(st.Dev)
	}
	return id, nil
}

// openCache returns the cache slot for req in dir, or nil and the reason
// the cache cannot be used. The directory is created if missing and must
// belong to the current user and not be writable by others: a result read
// from it is trusted.
func openCache(dir string, req Request) (*cache, string) {
	if dir == "" {
		return nil, "no cache directory (not root and XDG_RUNTIME_DIR unset)"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Sprintf("cache directory %s unusable: %v", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Sprintf("cache directory %s unusable: %v", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Sprintf("cache directory %s not used: must be a directory owned by uid %d and not writable by others",
			dir, os.Geteuid())
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return nil, fmt.Sprintf("cache directory %s not writable: %v", dir, err)
	}
	key, err := cacheKey(req)
	if err != nil {
		return nil, "not cached: " + err.Error()
	}
	return &cache{path: filepath.Join(dir, "driverprobe-"+key[:32]+".json"), key: key}, ""
}

// cacheKey hashes everything a result depends on.
func cacheKey(req Request) (string, error) {
	cuda, err := identify(req.Libcuda)
	if err != nil {
		return "", fmt.Errorf("identify libcuda: %w", err)
	}
	k := struct {
		Version int      `json:"v"`
		Cuda    fileID   `json:"cuda"`
		NVML    *fileID  `json:"nvml,omitempty"`
		Module  string   `json:"module"`
		Bus     []string `json:"bus"`
		MIG     []string `json:"mig,omitempty"`
	}{Version: cacheVersion, Cuda: cuda, Module: req.ModuleVersion, Bus: req.BusIDs, MIG: req.MIGLayout}
	if req.NVML != "" {
		n, err := identify(req.NVML)
		if err != nil {
			return "", fmt.Errorf("identify NVML: %w", err)
		}
		k.NVML = &n
	}
	b, err := json.Marshal(k)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func (c *cache) load() (*Result, bool) {
	b, err := hostfile.ReadFile(c.path, hostfile.MaxConfig)
	if err != nil {
		return nil, false
	}
	var e cacheEntry
	if json.Unmarshal(b, &e) != nil || e.Version != cacheVersion || e.Key != c.key || e.Result == nil {
		return nil, false
	}
	return e.Result, true
}

// store writes the entry atomically (temporary file, then rename; mode
// 0644, not synced: an entry lost in a crash only costs a new probe).
func (c *cache) store(r *Result) error {
	b, err := json.Marshal(cacheEntry{Version: cacheVersion, Key: c.key, Result: r})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(c.path, b, atomicfile.Options{Mode: 0o644})
}
