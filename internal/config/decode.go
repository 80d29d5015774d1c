package config

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// decode parses data over c, keeping unknown keys in c.Unknown with a
// warning each. Errors name the file, line and key. The file is parsed once
// (strictly, which still fills every known key); only a file with unknown
// keys is parsed again, into a generic tree, for their values.
func decode(data []byte, name string, c *Config) error {
	d := toml.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	err := d.Decode(c)
	var sm *toml.StrictMissingError
	if !errors.As(err, &sm) {
		if err != nil {
			return decodeError(name, err)
		}
		return nil
	}
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		return decodeError(name, err)
	}
	for _, e := range sm.Errors {
		key := e.Key()
		row, _ := e.Position()
		if v, ok := lookupTree(raw, key); ok {
			if c.Unknown == nil {
				c.Unknown = map[string]any{}
			}
			putTree(c.Unknown, key, v)
		}
		c.warn(fmt.Sprintf("%s:%d: unknown key %s (kept, ignored)", name, row, dotted(key)))
	}
	return nil
}

// decodeError rewrites a go-toml error as "config FILE: line N, key K: …".
func decodeError(name string, err error) error {
	var de *toml.DecodeError
	if !errors.As(err, &de) {
		return fmt.Errorf("config %s: %w", name, err)
	}
	row, col := de.Position()
	key := de.Key()
	msg := de.Error()
	if strings.Contains(msg, "cannot decode") {
		if want := describeType(key); want != "" {
			msg = fmt.Sprintf("wrong type: want %s", want)
		}
	}
	msg = strings.TrimPrefix(msg, "toml: ")
	if len(key) > 0 {
		return fmt.Errorf("config %s: line %d, column %d, key %s: %s", name, row, col, dotted(key), msg)
	}
	return fmt.Errorf("config %s: line %d, column %d: %s", name, row, col, msg)
}

// dotted renders a key path, quoting parts that are not bare keys.
func dotted(key []string) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = tomlKey(k)
	}
	return strings.Join(parts, ".")
}

// describeType names what the known key path holds ("" if the path is
// not a known key).
func describeType(key []string) string {
	f, ok := fieldByPath(reflect.TypeOf(Config{}), key)
	if !ok {
		return ""
	}
	switch f.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array of strings"
	case reflect.Struct:
		return "a table"
	}
	return f.String()
}

// lookupTree finds a key path in a generic TOML tree.
func lookupTree(tree map[string]any, key []string) (any, bool) {
	var cur any = tree
	for _, k := range key {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// putTree stores v at a key path, creating tables on the way.
func putTree(tree map[string]any, key []string, v any) {
	for _, k := range key[:len(key)-1] {
		next, ok := tree[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			tree[k] = next
		}
		tree = next
	}
	tree[key[len(key)-1]] = v
}
