package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultRuntimeHookPath is the nvidia-container-runtime-hook executable
// an OCI hook file points at by default.
const DefaultRuntimeHookPath = "/usr/bin/nvidia-container-runtime-hook"

// hookSearchPath is the PATH an OCI hook file gives the hook.
func hookSearchPath() []string {
	return []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
}

// ociHookFile is a hooks.d file in the format of the OCI hooks
// configuration (version 1.0.0), read by Podman, CRI-O and others.
type ociHookFile struct {
	Version string      `json:"version"`
	Hook    ociHookSpec `json:"hook"`
	When    ociHookWhen `json:"when"`
	Stages  []string    `json:"stages"`
}

type ociHookSpec struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
}

type ociHookWhen struct {
	Always   bool     `json:"always"`
	Commands []string `json:"commands"`
}

// OCIHook returns the hooks.d JSON file that `runtime configure
// --config-mode=oci-hook` writes: the hook at hookPath (absolute) run as
// "<base name> prestart" for every container, with a PATH of the usual
// system directories plus hookPath's directory when it is not among them.
// The JSON is indented with two spaces and ends in a newline.
func OCIHook(hookPath string) ([]byte, error) {
	if !filepath.IsAbs(hookPath) {
		return nil, fmt.Errorf("runtime hook path %q must be absolute", hookPath)
	}
	dirs := hookSearchPath()
	if dir := filepath.Dir(hookPath); !slices.Contains(dirs, dir) {
		dirs = append(dirs, dir)
	}
	h := ociHookFile{
		Version: "1.0.0",
		Hook: ociHookSpec{
			Path: hookPath,
			Args: []string{filepath.Base(hookPath), "prestart"},
			Env:  []string{"PATH=" + strings.Join(dirs, ":")},
		},
		When:   ociHookWhen{Always: true, Commands: []string{".*"}},
		Stages: []string{"prestart"},
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("encoding the OCI hook: %w", err)
	}
	return b.Bytes(), nil
}
