package ocispec

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The generic forms of the runtime-spec entries the CDI editor writes,
// built directly: what json.Marshal then a UseNumber decode give (toGeneric),
// without encoding/json's reflection, whose per-type tables a fresh process
// builds on every container create. The fields, their order-free names and
// their omitempty rules are runtime-spec's (its json tags);
// TestGenericOfMatchesJSON compares each with toGeneric.

// genericOf returns the generic form of v when it is one of the lists
// the CDI editor writes and every string in it is valid UTF-8 (json.Marshal
// replaces invalid bytes; toGeneric does that); ok is false otherwise.
func genericOf(v any) (out []any, ok bool) {
	switch l := v.(type) {
	case []string:
		out = make([]any, len(l))
		for i, s := range l {
			if !utf8.ValidString(s) {
				return nil, false
			}
			out[i] = s
		}
	case []uint32:
		out = make([]any, len(l))
		for i, n := range l {
			out[i] = unum(uint64(n))
		}
	case []specs.Mount:
		out = make([]any, len(l))
		for i, m := range l {
			o := object{"destination": m.Destination}
			g := gen{o: o, ok: true}
			g.str("type", m.Type, true)
			g.str("source", m.Source, true)
			g.strs("options", m.Options)
			g.idmap("uidMappings", m.UIDMappings)
			g.idmap("gidMappings", m.GIDMappings)
			if !g.ok || !utf8.ValidString(m.Destination) {
				return nil, false
			}
			out[i] = o
		}
	case []specs.LinuxDevice:
		out = make([]any, len(l))
		for i, d := range l {
			o := object{"path": d.Path, "type": d.Type, "major": num(d.Major), "minor": num(d.Minor)}
			if d.FileMode != nil {
				o["fileMode"] = unum(uint64(*d.FileMode))
			}
			if d.UID != nil {
				o["uid"] = unum(uint64(*d.UID))
			}
			if d.GID != nil {
				o["gid"] = unum(uint64(*d.GID))
			}
			if !utf8.ValidString(d.Path) || !utf8.ValidString(d.Type) {
				return nil, false
			}
			out[i] = o
		}
	case []specs.LinuxDeviceCgroup:
		out = make([]any, len(l))
		for i, r := range l {
			o := object{"allow": r.Allow}
			g := gen{o: o, ok: true}
			g.str("type", r.Type, true)
			if r.Major != nil {
				o["major"] = num(*r.Major)
			}
			if r.Minor != nil {
				o["minor"] = num(*r.Minor)
			}
			g.str("access", r.Access, true)
			if !g.ok {
				return nil, false
			}
			out[i] = o
		}
	case []specs.Hook:
		out = make([]any, len(l))
		for i, h := range l {
			o := object{"path": h.Path}
			g := gen{o: o, ok: true}
			g.strs("args", h.Args)
			g.strs("env", h.Env)
			if h.Timeout != nil {
				o["timeout"] = num(int64(*h.Timeout))
			}
			if !g.ok || !utf8.ValidString(h.Path) {
				return nil, false
			}
			out[i] = o
		}
	default:
		return nil, false
	}
	return out, true
}

// gen adds fields to a generic object; ok turns false at the first string
// that is not valid UTF-8.
type gen struct {
	o  object
	ok bool
}

func (g *gen) str(key, s string, omitEmpty bool) {
	if s == "" && omitEmpty {
		return
	}
	if !utf8.ValidString(s) {
		g.ok = false
	}
	g.o[key] = s
}

// strs adds a []string field with omitempty.
func (g *gen) strs(key string, l []string) {
	if len(l) == 0 {
		return
	}
	a, ok := genericOf(l)
	if !ok {
		g.ok = false
		return
	}
	g.o[key] = a
}

// idmap adds a []specs.LinuxIDMapping field with omitempty.
func (g *gen) idmap(key string, l []specs.LinuxIDMapping) {
	if len(l) == 0 {
		return
	}
	a := make([]any, len(l))
	for i, m := range l {
		a[i] = object{"containerID": unum(uint64(m.ContainerID)), "hostID": unum(uint64(m.HostID)), "size": unum(uint64(m.Size))}
	}
	g.o[key] = a
}

func unum(n uint64) json.Number { return json.Number(strconv.FormatUint(n, 10)) }
