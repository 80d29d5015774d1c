package engine

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// tomlTable is a decoded TOML table.
type tomlTable = map[string]any

// parseTOML decodes data (empty data is an empty table).
func parseTOML(data []byte) (tomlTable, error) {
	t := tomlTable{}
	if len(bytes.TrimSpace(data)) == 0 {
		return t, nil
	}
	if err := toml.Unmarshal(data, &t); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("parsing TOML at line %d, column %d: %s", row, col, de.Error())
		}
		return nil, fmt.Errorf("parsing TOML: %w", err)
	}
	if t == nil {
		t = tomlTable{}
	}
	return t, nil
}

// marshalTOML encodes t with indented sub-tables.
func marshalTOML(t tomlTable) ([]byte, error) {
	var b bytes.Buffer
	enc := toml.NewEncoder(&b)
	enc.SetIndentTables(true)
	if err := enc.Encode(t); err != nil {
		return nil, fmt.Errorf("encoding TOML: %w", err)
	}
	return b.Bytes(), nil
}

// encodeChanged returns t encoded, or data itself when data is not empty and
// t still equals before, the table data decoded to: a file that already says
// what was asked keeps its bytes.
func encodeChanged(data []byte, before any, t tomlTable) ([]byte, error) {
	if len(bytes.TrimSpace(data)) > 0 && reflect.DeepEqual(before, any(t)) {
		return data, nil
	}
	return marshalTOML(t)
}

// subTable returns t[key] as a table. With create, a missing key is added
// as an empty table; without, a missing key gives nil. A key holding
// anything but a table is an error naming the dotted path.
func subTable(t tomlTable, path []string, create bool) (tomlTable, error) {
	cur := t
	for i, k := range path {
		v, ok := cur[k]
		if !ok {
			if !create {
				return nil, nil
			}
			n := tomlTable{}
			cur[k] = n
			cur = n
			continue
		}
		n, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is a %s, not a table", dotted(path[:i+1]), tomlKind(v))
		}
		cur = n
	}
	return cur, nil
}

// lookupTable returns the table at path in t, or nil when there is none
// (a missing key or a value of another kind).
func lookupTable(t tomlTable, path []string) tomlTable {
	cur := t
	for _, k := range path {
		n, ok := cur[k].(map[string]any)
		if !ok {
			return nil
		}
		cur = n
	}
	return cur
}

// dotted renders a key path the way TOML writes it.
func dotted(path []string) string {
	parts := make([]string, len(path))
	for i, k := range path {
		if k != "" && strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == "" {
			parts[i] = k
		} else {
			parts[i] = fmt.Sprintf("%q", k)
		}
	}
	return strings.Join(parts, ".")
}

func tomlKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case int64:
		return "integer"
	case float64:
		return "float"
	case []any:
		return "array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// deepCopy copies a decoded TOML value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		n := make(map[string]any, len(x))
		for k, e := range x {
			n[k] = deepCopy(e)
		}
		return n
	case []any:
		n := make([]any, len(x))
		for i, e := range x {
			n[i] = deepCopy(e)
		}
		return n
	default:
		return v
	}
}

// stringSlice converts a decoded TOML array of strings.
func stringSlice(v any) ([]string, bool) {
	a, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(a))
	for _, e := range a {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, e := range s {
		out[i] = e
	}
	return out
}

// ParseTOML decodes an engine's TOML configuration (empty data is an empty
// table), for readers outside this package such as the doctor.
func ParseTOML(data []byte) (map[string]any, error) { return parseTOML(data) }

// TOMLValue returns the value at a key path in a decoded TOML tree.
func TOMLValue(t any, keys ...string) (any, bool) {
	cur := t
	for _, k := range keys {
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
