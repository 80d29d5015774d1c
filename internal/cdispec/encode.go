package cdispec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	cdi "tags.cncf.io/container-device-interface/specs-go"
)

// Format is a spec file's encoding.
type Format string

// Spec file formats.
const (
	FormatYAML Format = "yaml"
	FormatJSON Format = "json"
)

// ParseFormat reads a --format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case FormatYAML, FormatJSON:
		return f, nil
	case "yml":
		return FormatYAML, nil
	}
	return "", fmt.Errorf("format %q: want yaml or json", s)
}

// FormatOf returns the format a file name's extension asks for: json for
// .json, yaml otherwise (the CDI library reads .yaml and .json files).
func FormatOf(name string) Format {
	if strings.EqualFold(filepath.Ext(name), ".json") {
		return FormatJSON
	}
	return FormatYAML
}

// Marshal encodes spec. JSON is indented; YAML keeps the fields in the
// order of the CDI specification (cdiVersion, kind, devices,
// containerEdits), quotes every string that YAML 1.1 or 1.2 could read as
// anything but that string ("0", "1:0", "yes"), and reads back to the same
// spec with the CDI library's strict parser.
func Marshal(spec *cdi.Spec, f Format) ([]byte, error) {
	if spec == nil {
		return nil, fmt.Errorf("encode CDI spec: no spec")
	}
	switch f {
	case FormatJSON:
		b, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode CDI spec %s as JSON: %w", spec.Kind, err)
		}
		return append(b, '\n'), nil
	case FormatYAML, "":
		w := &yamlWriter{}
		w.spec(spec)
		if w.err != nil {
			return nil, fmt.Errorf("encode CDI spec %s as YAML: %w", spec.Kind, w.err)
		}
		return w.buf.Bytes(), nil
	}
	return nil, fmt.Errorf("encode CDI spec: unknown format %q", f)
}

// yamlWriter writes the block-style YAML of a CDI spec.
type yamlWriter struct {
	buf bytes.Buffer
	err error
}

func (w *yamlWriter) line(indent int, s string) {
	for range indent {
		w.buf.WriteString("  ")
	}
	w.buf.WriteString(s)
	w.buf.WriteByte('\n')
}

// str returns s as a YAML scalar.
func (w *yamlWriter) str(s string) string {
	if !utf8.ValidString(s) {
		if w.err == nil {
			w.err = fmt.Errorf("string %q is not valid UTF-8", s)
		}
		return `""`
	}
	if plainSafe(s) {
		return s
	}
	return strconv.Quote(s)
}

// plainSafe reports whether s can be written unquoted: it starts with a
// letter, '/' or a '-' followed by a letter or '-' (a flag), holds only
// letters, digits, / . _ = + - and colons that are followed by another
// character, and is not a word YAML 1.1 reads as a boolean or null. A
// string starting with a digit is always quoted: YAML 1.1 reads "1:0" as a
// number. Anything else is quoted (strconv.Quote's escapes are all valid
// in YAML double-quoted scalars).
func plainSafe(s string) bool {
	if s == "" {
		return false
	}
	switch c := s[0]; {
	case c == '/' || isLetter(c):
	case c == '-' && len(s) > 1 && (isLetter(s[1]) || s[1] == '-'):
	default:
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isLetter(c), c >= '0' && c <= '9', strings.IndexByte("/._=+-", c) >= 0:
		case c == ':' && i+1 < len(s):
		default:
			return false
		}
	}
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "true", "false", "on", "off", "null":
		return false
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// kv writes "key: value" at indent.
func (w *yamlWriter) kv(indent int, key, value string) { w.line(indent, key+": "+value) }

// item starts a list entry: "- key: value" at indent.
func (w *yamlWriter) item(indent int, key, value string) { w.line(indent, "- "+key+": "+value) }

// opt writes "key: s" unless s is empty.
func (w *yamlWriter) opt(indent int, key, s string) {
	if s != "" {
		w.kv(indent, key, w.str(s))
	}
}

func (w *yamlWriter) list(indent int, key string, items []string) {
	if len(items) == 0 {
		return
	}
	w.line(indent, key+":")
	for _, s := range items {
		w.line(indent, "- "+w.str(s))
	}
}

func (w *yamlWriter) annotations(indent int, a map[string]string) {
	if len(a) == 0 {
		return
	}
	w.line(indent, "annotations:")
	for _, k := range slices.Sorted(maps.Keys(a)) {
		w.line(indent+1, w.str(k)+": "+w.str(a[k]))
	}
}

func (w *yamlWriter) spec(s *cdi.Spec) {
	w.line(0, "---")
	w.line(0, "cdiVersion: "+w.str(s.Version))
	w.line(0, "kind: "+w.str(s.Kind))
	w.annotations(0, s.Annotations)
	if len(s.Devices) == 0 {
		w.line(0, "devices: []")
	} else {
		w.line(0, "devices:")
	}
	for _, d := range s.Devices {
		w.item(0, "name", w.str(d.Name))
		w.annotations(1, d.Annotations)
		w.edits(1, "containerEdits", &d.ContainerEdits, true)
	}
	w.edits(0, "containerEdits", &s.ContainerEdits, false)
}

// edits writes a containerEdits block; an empty one is written as {} when
// required (a device's) and left out otherwise.
func (w *yamlWriter) edits(indent int, key string, e *cdi.ContainerEdits, required bool) {
	if len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.NetDevices) == 0 && len(e.Hooks) == 0 && len(e.Mounts) == 0 &&
		e.IntelRdt == nil && len(e.AdditionalGIDs) == 0 {
		if required {
			w.line(indent, key+": {}")
		}
		return
	}
	w.line(indent, key+":")
	in := indent + 1
	w.list(in, "env", e.Env)
	if len(e.DeviceNodes) > 0 {
		w.line(in, "deviceNodes:")
		for _, n := range e.DeviceNodes {
			w.item(in, "path", w.str(n.Path))
			f := in + 1
			w.opt(f, "hostPath", n.HostPath)
			w.opt(f, "type", n.Type)
			if n.Major != 0 {
				w.kv(f, "major", strconv.FormatInt(n.Major, 10))
			}
			if n.Minor != 0 {
				w.kv(f, "minor", strconv.FormatInt(n.Minor, 10))
			}
			if n.FileMode != nil {
				w.kv(f, "fileMode", strconv.FormatUint(uint64(*n.FileMode), 10))
			}
			w.opt(f, "permissions", n.Permissions)
			if n.UID != nil {
				w.kv(f, "uid", strconv.FormatUint(uint64(*n.UID), 10))
			}
			if n.GID != nil {
				w.kv(f, "gid", strconv.FormatUint(uint64(*n.GID), 10))
			}
		}
	}
	if len(e.NetDevices) > 0 {
		w.line(in, "netDevices:")
		for _, n := range e.NetDevices {
			w.item(in, "hostInterfaceName", w.str(n.HostInterfaceName))
			w.kv(in+1, "name", w.str(n.Name))
		}
	}
	if len(e.Hooks) > 0 {
		w.line(in, "hooks:")
		for _, h := range e.Hooks {
			w.item(in, "hookName", w.str(h.HookName))
			f := in + 1
			w.kv(f, "path", w.str(h.Path))
			w.list(f, "args", h.Args)
			w.list(f, "env", h.Env)
			if h.Timeout != nil {
				w.kv(f, "timeout", strconv.Itoa(*h.Timeout))
			}
		}
	}
	if len(e.Mounts) > 0 {
		w.line(in, "mounts:")
		for _, m := range e.Mounts {
			w.item(in, "hostPath", w.str(m.HostPath))
			f := in + 1
			w.kv(f, "containerPath", w.str(m.ContainerPath))
			w.list(f, "options", m.Options)
			w.opt(f, "type", m.Type)
		}
	}
	if r := e.IntelRdt; r != nil {
		if r.ClosID == "" && r.L3CacheSchema == "" && r.MemBwSchema == "" && len(r.Schemata) == 0 && !r.EnableMonitoring {
			w.line(in, "intelRdt: {}")
		} else {
			w.line(in, "intelRdt:")
			f := in + 1
			w.opt(f, "closID", r.ClosID)
			w.opt(f, "l3CacheSchema", r.L3CacheSchema)
			w.opt(f, "memBwSchema", r.MemBwSchema)
			w.list(f, "schemata", r.Schemata)
			if r.EnableMonitoring {
				w.kv(f, "enableMonitoring", "true")
			}
		}
	}
	if len(e.AdditionalGIDs) > 0 {
		w.line(in, "additionalGids:")
		for _, g := range e.AdditionalGIDs {
			w.line(in, "- "+strconv.FormatUint(uint64(g), 10))
		}
	}
}
