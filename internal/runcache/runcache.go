// Package runcache keeps small facts about the running host that cost a
// driver call or a slow procfs read (the driver probe's results, the
// kernel module version, the GPUs' information files, the MIG capability
// minors) in a directory on tmpfs that only the caller can write:
// /run/nctk for root, $XDG_RUNTIME_DIR/nctk for other users. An entry is
// found by a key that hashes everything its value depends on, so a changed
// input is a miss, never a stale hit; a lost entry costs one more read.
package runcache

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

// DefaultDir returns the cache directory: /run/nctk for root,
// $XDG_RUNTIME_DIR/nctk for other users, "" (no cache) when neither
// applies. getenv is os.Getenv or an app.Env's Getenv.
func DefaultDir(getenv func(string) string) string {
	if os.Geteuid() == 0 {
		return "/run/nctk"
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "nctk")
	}
	return ""
}

// Dir is a checked cache directory.
type Dir struct{ path string }

// Open creates dir if missing and checks that it belongs to the current
// user and is not writable by others (what is read from it is trusted). It
// returns nil and the reason when the directory cannot be used.
func Open(dir string) (*Dir, string) {
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
	return &Dir{path: dir}, ""
}

// Key hashes v (marshalled as JSON): the identity of everything a cached
// value depends on.
func Key(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return KeyOf(string(b)), nil
}

// KeyOf is Key for a key the caller spelled out as text: no encoding/json
// (whose tables a fresh process builds cold, ~0.1 ms) on a per-create path.
func KeyOf(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// entry is what a cache file holds.
type entry struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// file is the cache file of kind (a short name such as "driverprobe") for
// key.
func (d *Dir) file(kind, key string) string {
	if len(key) > 32 {
		key = key[:32]
	}
	return filepath.Join(d.path, kind+"-"+key+".json")
}

// Load decodes the value stored for kind and key into v; false when there
// is none (or it cannot be read or decoded).
func (d *Dir) Load(kind, key string, v any) bool {
	b, err := hostfile.ReadFile(d.file(kind, key), hostfile.MaxConfig)
	if err != nil {
		return false
	}
	var e entry
	if json.Unmarshal(b, &e) != nil || e.Key != key || len(e.Value) == 0 {
		return false
	}
	return json.Unmarshal(e.Value, v) == nil
}

// Store writes v for kind and key atomically (temporary file, then rename;
// mode 0644, not synced: an entry lost in a crash costs one more read).
func (d *Dir) Store(kind, key string, v any) error {
	val, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b, err := json.Marshal(entry{Key: key, Value: val})
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(d.file(kind, key), b, atomicfile.Options{Mode: 0o644})
}

// FileID identifies one version of a file (for keys).
type FileID struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
	Ino   uint64 `json:"ino"`
	Dev   uint64 `json:"dev"`
}

// Identify returns path's FileID (links followed).
func Identify(path string) (FileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileID{}, err
	}
	id := FileID{Path: path, Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.Ino, id.Dev = st.Ino, uint64(st.Dev)
	}
	return id, nil
}
