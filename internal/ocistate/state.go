// Package ocistate reads what an OCI hook is given: the container's state
// on stdin (DecodeState, ParseState) and, from the bundle's config.json,
// the container's root directory (LoadRootPath). nvidia-cdi-hook reads
// them on every create, so the package links no CDI library.
package ocistate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// State is the OCI container state a runtime passes to hooks on stdin.
type State struct {
	Version     string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Pid         int               `json:"pid"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Root is the container's root directory, absolute or relative to the
	// bundle: a non-standard field some runtimes (crun) add. Empty when
	// the state has none.
	Root string `json:"root,omitempty"`
}

// rawState is the JSON a runtime writes: State plus Docker's old
// "bundlePath", with "root" kept raw so that each caller decides how
// strictly to read it.
type rawState struct {
	State
	BundlePath string          `json:"bundlePath"`
	Root       json.RawMessage `json:"root"`
}

// decodeState decodes the state JSON (bundle from "bundle", else
// "bundlePath") and returns the raw "root" value undecoded.
func decodeState(data []byte) (State, json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return State{}, nil, errors.New("OCI state: empty input (a hook expects the container's state JSON on stdin)")
	}
	var raw rawState
	if err := json.Unmarshal(data, &raw); err != nil {
		return State{}, nil, stateError("", err)
	}
	s := raw.State
	if s.Bundle == "" {
		s.Bundle = raw.BundlePath
	}
	return s, raw.Root, nil
}

// stateError words a decoding error of the state JSON, or of its field
// field when the value was decoded on its own.
func stateError(field string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("OCI state: invalid JSON at byte %d: %w", se.Offset, err)
	case errors.As(err, &te) && te.Field == "" && field == "":
		return fmt.Errorf("OCI state: want a JSON object, not a JSON %s", te.Value)
	case errors.As(err, &te):
		if field == "" {
			field = strings.TrimPrefix(te.Field, "State.")
		}
		return fmt.Errorf("OCI state: field %q: want %s, not a JSON %s", field, te.Type, te.Value)
	}
	return fmt.Errorf("OCI state: %w", err)
}

// DecodeState decodes the OCI state JSON a hook reads on stdin, with no
// requirement on its content: the bundle is "bundle", or "bundlePath" as
// Docker before 17.06 sent it; Root is the non-standard "root" string.
// It fails only on empty input, invalid JSON, a JSON value that is not an
// object (null decodes as an empty state), or a field of the wrong type
// (naming the field). Callers check
// what they need (ParseState: a pid and a bundle).
func DecodeState(data []byte) (State, error) {
	s, root, err := decodeState(data)
	if err != nil {
		return State{}, err
	}
	if len(root) > 0 {
		if err := json.Unmarshal(root, &s.Root); err != nil {
			return State{}, stateError("root", err)
		}
	}
	return s, nil
}

// ParseState parses the OCI state JSON a hook reads on stdin. The bundle is
// "bundle", or "bundlePath" as Docker before 17.06 sent it. The state must
// be one JSON object with a positive pid and a bundle. A "root" that is not
// a string is ignored (Root stays empty): the runtime hook does not use it.
func ParseState(data []byte) (State, error) {
	s, root, err := decodeState(data)
	if err != nil {
		return State{}, err
	}
	if len(root) > 0 && json.Unmarshal(root, &s.Root) != nil {
		s.Root = ""
	}
	if s.Pid <= 0 {
		return State{}, fmt.Errorf("OCI state: pid %d: want the container's process id (a positive number)", s.Pid)
	}
	if s.Bundle == "" {
		return State{}, errors.New("OCI state: no bundle (neither \"bundle\" nor \"bundlePath\" is set)")
	}
	return s, nil
}
