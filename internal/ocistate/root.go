package ocistate

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/jsonerr"
)

// MaxSpecSize bounds the config.json read (a real one is a few KiB).
const MaxSpecSize = 64 << 20

// LoadRootPath reads the container's root directory from the config.json
// at path: root.path alone, resolved as RootPath does. The createContainer
// hooks need nothing else of a config.json that, once an engine has
// injected a CDI spec, holds dozens of mounts (the whole document is still
// checked to be one JSON object).
func LoadRootPath(path, bundle string) (string, error) {
	data, err := hostfile.ReadFile(path, MaxSpecSize)
	if err != nil {
		return "", fmt.Errorf("read OCI spec: %w", err)
	}
	var v struct {
		Root *specs.Root `json:"root"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return "", fmt.Errorf("invalid OCI spec %s: %w", path, jsonerr.Describe(data, err))
	}
	var p string
	if v.Root != nil {
		p = v.Root.Path
	}
	return RootPath(path, p, bundle)
}

// RootPath is the container's root directory given root.path p of the OCI
// spec named spec: p joined to bundle (the directory holding config.json)
// when relative, made absolute and clean. An empty p is an error naming
// the spec.
func RootPath(spec, p, bundle string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("invalid OCI spec %s: root.path is not set", spec)
	}
	rel := p
	if !filepath.IsAbs(p) {
		p = filepath.Join(bundle, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("OCI spec %s: root.path %s: %w", spec, rel, err)
	}
	return abs, nil
}

// memoName is the file beside config.json in which LoadRootPathMemo keeps
// the root path it read.
const memoName = ".nctk-root-path"

// LoadRootPathMemo is LoadRootPath for hooks that run one after another on
// one config.json: a spec in NVIDIA's layout, applied by an engine, makes
// runc start five hook processes, and each would decode all of an
// engine-applied config.json (17 KiB and 0.3-0.4 ms on a 2-vCPU VM) for
// root.path. With keep the answer is kept beside config.json, in the
// bundle (the engine's directory, removed with it), under config.json's
// identity (bundle, device, inode, size, modification and change times);
// a later call on the same file reads that instead. An answer kept for
// another identity, or not absolute and clean, is ignored; one that cannot
// be kept is not an error.
func LoadRootPathMemo(path, bundle string, keep bool) (string, error) {
	return loadRootPathMemo(path, bundle, keep, LoadRootPath)
}

// loadRootPathMemo is LoadRootPathMemo reading config.json with load.
func loadRootPathMemo(path, bundle string, keep bool, load func(path, bundle string) (string, error)) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return load(path, bundle) // its error names the file
	}
	key := fmt.Sprintf("%s\x00%d %d %d %d.%d %d.%d", bundle, st.Dev, st.Ino, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	memo := filepath.Join(filepath.Dir(path), memoName)
	if data, err := hostfile.ReadFile(memo, int64(len(key))+4096+2); err == nil {
		// key, root, each ended by a newline: a write cut short is no
		// answer.
		if l := strings.Split(string(data), "\n"); len(l) == 3 && l[0] == key && l[2] == "" &&
			filepath.IsAbs(l[1]) && filepath.Clean(l[1]) == l[1] {
			return l[1], nil
		}
	}
	root, err := load(path, bundle)
	if err == nil && keep && !strings.Contains(root, "\n") {
		keepMemo(memo, key+"\n"+root+"\n")
	}
	return root, err
}

// keepMemo writes data to the memo file in one write (the hooks that read
// it run one after another; a write cut short lacks the last newline),
// replacing a regular file there and nothing else.
func keepMemo(memo, data string) {
	fd, err := unix.Open(memo, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	_, _ = unix.Write(fd, []byte(data))
}
