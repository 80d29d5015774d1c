package config

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// tomlTag returns a struct field's TOML key and whether it is omitempty
// ("" for fields that are not part of the file).
func tomlTag(f reflect.StructField) (name string, omitempty bool) {
	tag, ok := f.Tag.Lookup("toml")
	if !ok || tag == "-" {
		return "", false
	}
	name, opts, _ := strings.Cut(tag, ",")
	return name, opts == "omitempty"
}

// fieldByPath finds the type of the field at a key path.
func fieldByPath(t reflect.Type, key []string) (reflect.Type, bool) {
	for _, k := range key {
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		found := false
		for i := 0; i < t.NumField(); i++ {
			if name, _ := tomlTag(t.Field(i)); name == k {
				t, found = t.Field(i).Type, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return t, true
}

// Keys lists every known key as a dotted path, in file order.
func Keys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			name, _ := tomlTag(t.Field(i))
			if name == "" {
				continue
			}
			if t.Field(i).Type.Kind() == reflect.Struct {
				walk(t.Field(i).Type, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}

// Set sets the key at a dotted path ("nvidia-container-cli.load-kmods")
// from its text form, as `nvidia-ctk config --set key=value` does:
// booleans take strconv.ParseBool forms, and an empty value means true;
// the features.* flags also take "nil" (off); arrays are split on commas
// (and, except for nvidia-container-cli.environment, on colons), with
// whitespace trimmed and empty items dropped. Set does not validate the
// result; call Validate.
func Set(cfg *Config, key, value string) error {
	path := strings.Split(key, ".")
	v := reflect.ValueOf(cfg).Elem()
	for i, k := range path {
		if v.Kind() != reflect.Struct {
			return fmt.Errorf("config key %q: %s is not a table", key, strings.Join(path[:i], "."))
		}
		found := false
		for j := 0; j < v.NumField(); j++ {
			if name, _ := tomlTag(v.Type().Field(j)); name != "" && name == k {
				v, found = v.Field(j), true
				break
			}
		}
		if !found {
			return fmt.Errorf("config key %q: unknown key %q (known keys: %s)", key, strings.Join(path[:i+1], "."), strings.Join(Keys(), ", "))
		}
	}
	switch v.Kind() {
	case reflect.Bool:
		if value == "" || (path[0] == "features" && value == "nil") {
			v.SetBool(value == "")
			return nil
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("config key %q: value %q is not a boolean (true or false)", key, value)
		}
		v.SetBool(b)
	case reflect.String:
		v.SetString(value)
	case reflect.Slice:
		seps := ",:"
		if key == "nvidia-container-cli.environment" {
			seps = ","
		}
		items := []string{}
		for item := range strings.FieldsFuncSeq(value, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		v.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("config key %q is a table, not a value (keys below it: %s)", key, strings.Join(keysUnder(key), ", "))
	}
	return nil
}

func keysUnder(prefix string) []string {
	var out []string
	for _, k := range Keys() {
		if strings.HasPrefix(k, prefix+".") {
			out = append(out, k)
		}
	}
	return out
}

// commented holds the keys NVIDIA's `nvidia-ctk config` writes commented
// out while they have their default value, with the example value shown.
func commented() map[string]string {
	return map[string]string{
		"accept-nvidia-visible-devices-as-volume-mounts":         "false",
		"accept-nvidia-visible-devices-envvar-when-unprivileged": "true",
		"swarm-resource":                                           `"DOCKER_RESOURCE_GPU"`,
		"nvidia-container-cli.root":                                `"/run/nvidia/driver"`,
		"nvidia-container-cli.path":                                `"/usr/bin/nvidia-container-cli"`,
		"nvidia-container-cli.debug":                               `"/var/log/nvidia-container-toolkit.log"`,
		"nvidia-container-cli.ldcache":                             `"/etc/ld.so.cache"`,
		"nvidia-container-cli.no-cgroups":                          "false",
		"nvidia-container-cli.user":                                `"root:video"`,
		"nvidia-container-runtime.debug":                           `"/var/log/nvidia-container-runtime.log"`,
		"nvidia-container-runtime.modes.csv.compat-container-root": `"/usr/local/cuda/compat-orin"`,
	}
}

// Render writes the configuration as `nvidia-ctk config` prints it: every
// table and key in sorted order, keys that have their default value and
// that NVIDIA comments out written as comments with an example value,
// unknown keys kept in their tables.
func Render(cfg *Config) []byte { return render(cfg, true) }

// node is a table being rendered.
type node struct {
	leaves map[string]string // key -> rendered line (without the key for plain values)
	tables map[string]*node
	known  bool // a table of the schema (written even if empty only when it has leaves)
}

func newNode() *node { return &node{leaves: map[string]string{}, tables: map[string]*node{}} }

func render(cfg *Config, withComments bool) []byte {
	def := Default()
	root := newNode()
	root.known = true
	var build func(n *node, v, d reflect.Value, prefix string)
	build = func(n *node, v, d reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name, omitempty := tomlTag(t.Field(i))
			if name == "" {
				continue
			}
			fv, dv := v.Field(i), d.Field(i)
			if fv.Kind() == reflect.Struct {
				child := newNode()
				child.known = true
				n.tables[name] = child
				build(child, fv, dv, prefix+name+".")
				continue
			}
			if omitempty && fv.IsZero() {
				continue
			}
			if fv.Kind() == reflect.Slice && fv.Len() == 0 && omitempty {
				continue
			}
			if ex, ok := commented()[prefix+name]; ok && withComments && reflect.DeepEqual(fv.Interface(), dv.Interface()) {
				n.leaves[name] = "#" + tomlKey(name) + " = " + ex
				continue
			}
			n.leaves[name] = tomlKey(name) + " = " + formatValue(fv.Interface())
		}
	}
	build(root, reflect.ValueOf(cfg).Elem(), reflect.ValueOf(def).Elem(), "")
	mergeUnknown(root, cfg.Unknown)
	var b bytes.Buffer
	writeNode(&b, root, nil)
	return b.Bytes()
}

// mergeUnknown adds unknown keys to the tree; a key that collides with a
// known one is dropped (the known value wins).
func mergeUnknown(n *node, tree map[string]any) {
	for k, v := range tree {
		if m, ok := v.(map[string]any); ok {
			child := n.tables[k]
			if child == nil {
				if _, isLeaf := n.leaves[k]; isLeaf {
					continue
				}
				child = newNode()
				n.tables[k] = child
			}
			mergeUnknown(child, m)
			continue
		}
		if _, exists := n.leaves[k]; exists || n.tables[k] != nil {
			continue
		}
		n.leaves[k] = tomlKey(k) + " = " + formatValue(v)
	}
}

// hasContent reports whether a table writes any line, itself or below.
func (n *node) hasContent() bool {
	if len(n.leaves) > 0 {
		return true
	}
	for _, c := range n.tables {
		if c.hasContent() {
			return true
		}
	}
	return !n.known
}

func writeNode(b *bytes.Buffer, n *node, path []string) {
	keys := make([]string, 0, len(n.leaves))
	for k := range n.leaves {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return strings.TrimPrefix(keys[i], "#") < strings.TrimPrefix(keys[j], "#") })
	if len(path) > 0 && (len(keys) > 0 || !n.known) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("[" + dotted(path) + "]\n")
	}
	for _, k := range keys {
		b.WriteString(n.leaves[k])
		b.WriteByte('\n')
	}
	names := make([]string, 0, len(n.tables))
	for k := range n.tables {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if c := n.tables[k]; c.hasContent() {
			writeNode(b, c, append(slices.Clip(path), k))
		}
	}
}

// tomlKey quotes a key unless it is a bare key.
func tomlKey(k string) string {
	if k == "" {
		return `""`
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return quote(k)
		}
	}
	return k
}

// quote renders s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// formatValue renders a value: strings, booleans and string arrays
// directly, anything else (unknown keys' values) through go-toml with
// inline tables.
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return quote(x)
	case bool:
		return strconv.FormatBool(x)
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = quote(s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	var b bytes.Buffer
	enc := toml.NewEncoder(&b)
	enc.SetTablesInline(true)
	if err := enc.Encode(map[string]any{"v": v}); err != nil {
		return quote(fmt.Sprint(v))
	}
	return strings.TrimSpace(strings.TrimPrefix(b.String(), "v = "))
}
