package ocistate

import (
	"encoding/json"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/jsonerr"
)

// LoadCreateContainerHooks reads the createContainer hooks of the
// config.json at path, in the order the runtime runs them (none: an empty
// list). The whole document is checked to be one JSON object.
func LoadCreateContainerHooks(path string) ([]specs.Hook, error) {
	data, err := hostfile.ReadFile(path, MaxSpecSize)
	if err != nil {
		return nil, fmt.Errorf("read OCI spec: %w", err)
	}
	hooks, err := parseCreateContainerHooks(data)
	if err != nil {
		return nil, fmt.Errorf("invalid OCI spec %s: %w", path, err)
	}
	return hooks, nil
}

// parseCreateContainerHooks is LoadCreateContainerHooks on the document's
// bytes.
func parseCreateContainerHooks(data []byte) ([]specs.Hook, error) {
	var v struct {
		Hooks *struct {
			CreateContainer []specs.Hook `json:"createContainer"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, jsonerr.Describe(data, err)
	}
	if v.Hooks == nil {
		return nil, nil
	}
	return v.Hooks.CreateContainer, nil
}
