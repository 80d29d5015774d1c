package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// Docker is Docker's engine name.
const Docker Engine = "docker"

// DefaultDockerConfig is dockerd's configuration file.
const DefaultDockerConfig = "/etc/docker/daemon.json"

// dockerEngine is Docker: daemon.json, without drop-in files or a command
// that prints the effective configuration; dockerd looks a runtime given by
// name up in its PATH.
type dockerEngine struct{}

func (dockerEngine) Name() Engine                     { return Docker }
func (dockerEngine) Aliases() []string                { return nil }
func (dockerEngine) DefaultConfigPath() string        { return DefaultDockerConfig }
func (dockerEngine) DefaultDropInPath() string        { return "" }
func (dockerEngine) RuntimeByName() bool              { return true }
func (dockerEngine) ConfigCommands(string) [][]string { return nil }
func (dockerEngine) Daemon() string                   { return "dockerd" }

// Edit registers the runtime in daemon.json (see EditDocker).
func (dockerEngine) Edit(c Config, o Options) (*Result, error) {
	out, err := EditDocker(c.Main.Data, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Main.Path, err)
	}
	return &Result{Files: []File{c.Main.update(out)}}, nil
}

// EditDocker registers the runtime in the daemon.json content data (empty
// data is an empty configuration) and returns the new content, as NVIDIA's
// nvidia-ctk 1.20 writes it: runtimes.<name> becomes exactly
// {"args": [], "path": <path>} (an existing entry is replaced whole),
// "default-runtime": <name> is set with SetAsDefault (and left alone
// without it) and "features": {"cdi": true} with EnableCDI, other features
// kept. Every other key and value is kept as written, in its order; the
// output is indented with two spaces. When data already says all this, it
// is returned unchanged.
func EditDocker(data []byte, o Options) ([]byte, error) {
	o = o.withDefaults()
	if err := o.validate(dockerEngine{}); err != nil {
		return nil, err
	}
	root := newJSONObject()
	if len(bytes.TrimSpace(data)) > 0 {
		var err error
		if root, err = parseJSONObject(data); err != nil {
			return nil, fmt.Errorf("parsing JSON: %w", err)
		}
	}
	changed := len(bytes.TrimSpace(data)) == 0

	runtimes, err := root.child("runtimes")
	if err != nil {
		return nil, err
	}
	c, err := runtimes.setValue(o.RuntimeName, map[string]any{"args": []any{}, "path": o.RuntimePath})
	if err != nil {
		return nil, fmt.Errorf("runtimes: %w", err)
	}
	changed = changed || c
	root.setRaw("runtimes", runtimes.marshal())

	if o.SetAsDefault {
		c, err := root.setValue("default-runtime", o.RuntimeName)
		if err != nil {
			return nil, err
		}
		changed = changed || c
	}
	if o.EnableCDI {
		features, err := root.child("features")
		if err != nil {
			return nil, err
		}
		c, err := features.setValue("cdi", true)
		if err != nil {
			return nil, err
		}
		changed = changed || c
		root.setRaw("features", features.marshal())
	}
	if !changed {
		return data, nil
	}
	var out bytes.Buffer
	if err := json.Indent(&out, root.marshal(), "", "  "); err != nil {
		return nil, fmt.Errorf("formatting JSON: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// jsonObject is a JSON object that remembers its key order and keeps its
// values as written.
type jsonObject struct {
	keys []string
	vals map[string]json.RawMessage
}

func newJSONObject() *jsonObject { return &jsonObject{vals: map[string]json.RawMessage{}} }

// parseJSONObject decodes one JSON object. A key given twice keeps its
// first position and its last value, as encoding/json does.
func parseJSONObject(data []byte) (*jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want a JSON object, found %s", describeToken(tok))
	}
	o := newJSONObject()
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("want an object key, found %s", describeToken(tok))
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		o.setRaw(key, raw)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("after the object: %w", err)
		}
		return nil, fmt.Errorf("unexpected %s after the object", describeToken(tok))
	}
	return o, nil
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", t.String())
	case string:
		return fmt.Sprintf("string %q", t)
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%v", t)
	}
}

func (o *jsonObject) setRaw(key string, v json.RawMessage) {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

// setValue sets key to v unless it already holds an equal value, and
// reports whether it changed anything.
func (o *jsonObject) setValue(key string, v any) (bool, error) {
	if raw, ok := o.vals[key]; ok {
		var cur any
		if err := json.Unmarshal(raw, &cur); err == nil && reflect.DeepEqual(cur, v) {
			return false, nil
		}
	}
	raw, err := marshalNoEscape(v)
	if err != nil {
		return false, fmt.Errorf("encoding %q: %w", key, err)
	}
	o.setRaw(key, raw)
	return true, nil
}

// child returns the object stored under key, or a new empty one when the
// key is absent or null. Any other kind of value is an error.
func (o *jsonObject) child(key string) (*jsonObject, error) {
	raw, ok := o.vals[key]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return newJSONObject(), nil
	}
	c, err := parseJSONObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", key, err)
	}
	return c, nil
}

// marshal encodes o compactly in key order.
func (o *jsonObject) marshal() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := marshalNoEscape(k) // a string always encodes
		b.Write(kb)
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// marshalNoEscape is json.Marshal without HTML escaping.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
