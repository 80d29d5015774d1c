package ocistate

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

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
