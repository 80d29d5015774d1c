package ocispec

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// viewOfTree builds fullView from the generic tree Parse decoded, without a
// second pass of encoding/json over config.json (whose per-type tables a
// fresh process builds on every container create). It follows
// encoding/json's rules for the shapes config.json files have — fields by
// their exact json name, unknown fields ignored, null leaving a field
// zero, [] and {} decoding to empty non-nil lists and maps, integers
// parsed from the number's literal — and gives up (ok false) on anything
// else: a wrong type, a number that is no integer of the field's range, a
// key that differs from a field's name only in case (which encoding/json
// would match). The caller then decodes with
// encoding/json, which reports the error. FuzzViewOfTree checks that
// whatever it accepts, encoding/json decodes the same.
func viewOfTree(tree object) (*fullView, bool) {
	c := conv{ok: true}
	v := &fullView{}
	c.fields(tree, map[string]func(any){
		"ociVersion": func(x any) { v.Version = c.str(x) },
		"process": func(x any) {
			o := c.obj(x)
			if o == nil {
				return
			}
			p := &struct {
				processView
				User specs.User `json:"user"`
			}{}
			v.Process = p
			c.fields(o, map[string]func(any){
				"env":          func(x any) { p.Env = c.strs(x) },
				"capabilities": func(x any) { p.Capabilities = c.caps(x) },
				"user":         func(x any) { c.user(x, &p.User) },
			})
		},
		"root": func(x any) {
			o := c.obj(x)
			if o == nil {
				return
			}
			v.Root = &specs.Root{}
			c.fields(o, map[string]func(any){
				"path":     func(x any) { v.Root.Path = c.str(x) },
				"readonly": func(x any) { v.Root.Readonly = c.bool(x) },
			})
		},
		"mounts":      func(x any) { v.Mounts = c.mounts(x) },
		"annotations": func(x any) { v.Annotations = c.strMap(x) },
		"hooks":       func(x any) { v.Hooks = c.hooks(x) },
		"linux":       func(x any) { c.linux(x, v) },
	})
	if !c.ok {
		return nil, false
	}
	return v, true
}

// conv converts generic values; ok turns false at the first value it does
// not convert as encoding/json would.
type conv struct{ ok bool }

// fields calls set[k] for each key k of o that names a field; a key that
// matches a field's name only without regard to case stops the
// conversion (encoding/json would decode it into that field).
func (c *conv) fields(o object, set map[string]func(any)) {
	for k, x := range o {
		if !c.ok {
			return
		}
		if f, ok := set[k]; ok {
			f(x)
			continue
		}
		for name := range set {
			if strings.EqualFold(k, name) {
				c.ok = false
				return
			}
		}
	}
}

func (c *conv) obj(x any) object {
	if x == nil {
		return nil
	}
	o, ok := x.(object)
	if !ok {
		c.ok = false
	}
	return o
}

func (c *conv) arr(x any) ([]any, bool) {
	if x == nil {
		return nil, false
	}
	a, ok := x.([]any)
	if !ok {
		c.ok = false
	}
	return a, ok
}

func (c *conv) str(x any) string {
	if x == nil {
		return ""
	}
	s, ok := x.(string)
	if !ok {
		c.ok = false
	}
	return s
}

func (c *conv) bool(x any) bool {
	if x == nil {
		return false
	}
	b, ok := x.(bool)
	if !ok {
		c.ok = false
	}
	return b
}

// uint parses x as an unsigned integer of bits bits.
func (c *conv) uint(x any, bits int) uint64 {
	n, ok := x.(json.Number)
	if !ok {
		c.ok = false
		return 0
	}
	u, err := strconv.ParseUint(string(n), 10, bits)
	if err != nil {
		c.ok = false
	}
	return u
}

// int parses x as a signed integer of bits bits.
func (c *conv) int(x any, bits int) int64 {
	n, ok := x.(json.Number)
	if !ok {
		c.ok = false
		return 0
	}
	i, err := strconv.ParseInt(string(n), 10, bits)
	if err != nil {
		c.ok = false
	}
	return i
}

func (c *conv) u32(x any) uint32 { return uint32(c.uint(x, 32)) }

func (c *conv) u32p(x any) *uint32 {
	if x == nil {
		return nil
	}
	u := c.u32(x)
	return &u
}

func (c *conv) i64p(x any) *int64 {
	if x == nil {
		return nil
	}
	i := c.int(x, 64)
	return &i
}

func (c *conv) strs(x any) []string {
	a, ok := c.arr(x)
	if !ok {
		return nil
	}
	out := make([]string, len(a))
	for i, e := range a {
		out[i] = c.str(e)
	}
	return out
}

func (c *conv) u32s(x any) []uint32 {
	a, ok := c.arr(x)
	if !ok {
		return nil
	}
	out := make([]uint32, len(a))
	for i, e := range a {
		if e != nil {
			out[i] = c.u32(e)
		}
	}
	return out
}

func (c *conv) strMap(x any) map[string]string {
	o := c.obj(x)
	if o == nil {
		return nil
	}
	out := make(map[string]string, len(o))
	for k, e := range o {
		out[k] = c.str(e)
	}
	return out
}

func (c *conv) caps(x any) *specs.LinuxCapabilities {
	o := c.obj(x)
	if o == nil {
		return nil
	}
	v := &specs.LinuxCapabilities{}
	c.fields(o, map[string]func(any){
		"bounding":    func(x any) { v.Bounding = c.strs(x) },
		"effective":   func(x any) { v.Effective = c.strs(x) },
		"inheritable": func(x any) { v.Inheritable = c.strs(x) },
		"permitted":   func(x any) { v.Permitted = c.strs(x) },
		"ambient":     func(x any) { v.Ambient = c.strs(x) },
	})
	return v
}

func (c *conv) user(x any, u *specs.User) {
	o := c.obj(x)
	if o == nil {
		return
	}
	c.fields(o, map[string]func(any){
		"uid": func(x any) {
			if x != nil {
				u.UID = c.u32(x)
			}
		},
		"gid": func(x any) {
			if x != nil {
				u.GID = c.u32(x)
			}
		},
		"umask":          func(x any) { u.Umask = c.u32p(x) },
		"additionalGids": func(x any) { u.AdditionalGids = c.u32s(x) },
		"username":       func(x any) { u.Username = c.str(x) },
	})
}

func (c *conv) idmaps(x any) []specs.LinuxIDMapping {
	a, ok := c.arr(x)
	if !ok {
		return nil
	}
	out := make([]specs.LinuxIDMapping, len(a))
	for i, e := range a {
		m := &out[i]
		if o := c.obj(e); o != nil {
			c.fields(o, map[string]func(any){
				"containerID": func(x any) { m.ContainerID = c.u32z(x) },
				"hostID":      func(x any) { m.HostID = c.u32z(x) },
				"size":        func(x any) { m.Size = c.u32z(x) },
			})
		}
	}
	return out
}

// u32z is u32 with null as zero.
func (c *conv) u32z(x any) uint32 {
	if x == nil {
		return 0
	}
	return c.u32(x)
}

// i64z is a signed 64-bit integer with null as zero.
func (c *conv) i64z(x any) int64 {
	if x == nil {
		return 0
	}
	return c.int(x, 64)
}

func (c *conv) mounts(x any) []specs.Mount {
	a, ok := c.arr(x)
	if !ok {
		return nil
	}
	out := make([]specs.Mount, len(a))
	for i, e := range a {
		m := &out[i]
		if o := c.obj(e); o != nil {
			c.fields(o, map[string]func(any){
				"destination": func(x any) { m.Destination = c.str(x) },
				"type":        func(x any) { m.Type = c.str(x) },
				"source":      func(x any) { m.Source = c.str(x) },
				"options":     func(x any) { m.Options = c.strs(x) },
				"uidMappings": func(x any) { m.UIDMappings = c.idmaps(x) },
				"gidMappings": func(x any) { m.GIDMappings = c.idmaps(x) },
			})
		}
	}
	return out
}

func (c *conv) hookList(x any) []specs.Hook {
	a, ok := c.arr(x)
	if !ok {
		return nil
	}
	out := make([]specs.Hook, len(a))
	for i, e := range a {
		h := &out[i]
		if o := c.obj(e); o != nil {
			c.fields(o, map[string]func(any){
				"path": func(x any) { h.Path = c.str(x) },
				"args": func(x any) { h.Args = c.strs(x) },
				"env":  func(x any) { h.Env = c.strs(x) },
				"timeout": func(x any) {
					if x != nil {
						t := int(c.int(x, strconv.IntSize))
						h.Timeout = &t
					}
				},
			})
		}
	}
	return out
}

func (c *conv) hooks(x any) *specs.Hooks {
	o := c.obj(x)
	if o == nil {
		return nil
	}
	h := &specs.Hooks{}
	c.fields(o, map[string]func(any){
		//lint:ignore SA1019 config.json may still carry prestart hooks.
		"prestart":        func(x any) { h.Prestart = c.hookList(x) },
		"createRuntime":   func(x any) { h.CreateRuntime = c.hookList(x) },
		"createContainer": func(x any) { h.CreateContainer = c.hookList(x) },
		"startContainer":  func(x any) { h.StartContainer = c.hookList(x) },
		"poststart":       func(x any) { h.Poststart = c.hookList(x) },
		"poststop":        func(x any) { h.Poststop = c.hookList(x) },
	})
	return h
}

func (c *conv) linux(x any, v *fullView) {
	o := c.obj(x)
	if o == nil {
		return
	}
	l := &struct {
		linuxView
		NetDevices map[string]specs.LinuxNetDevice `json:"netDevices,omitempty"`
		IntelRdt   *specs.LinuxIntelRdt            `json:"intelRdt,omitempty"`
		Namespaces []specs.LinuxNamespace          `json:"namespaces,omitempty"`
	}{}
	v.Linux = l
	c.fields(o, map[string]func(any){
		"devices":       func(x any) { l.Devices = c.devices(x) },
		"maskedPaths":   func(x any) { l.MaskedPaths = c.strs(x) },
		"readonlyPaths": func(x any) { l.ReadonlyPaths = c.strs(x) },
		"resources": func(x any) {
			r := c.obj(x)
			if r == nil {
				return
			}
			l.Resources = &struct {
				Devices []specs.LinuxDeviceCgroup `json:"devices,omitempty"`
			}{}
			c.fields(r, map[string]func(any){"devices": func(x any) { l.Resources.Devices = c.rules(x) }})
		},
		"netDevices": func(x any) {
			m := c.obj(x)
			if m == nil {
				return
			}
			l.NetDevices = make(map[string]specs.LinuxNetDevice, len(m))
			for k, e := range m {
				var d specs.LinuxNetDevice
				if eo := c.obj(e); eo != nil {
					c.fields(eo, map[string]func(any){"name": func(x any) { d.Name = c.str(x) }})
				}
				l.NetDevices[k] = d
			}
		},
		"intelRdt": func(x any) {
			r := c.obj(x)
			if r == nil {
				return
			}
			l.IntelRdt = &specs.LinuxIntelRdt{}
			c.fields(r, map[string]func(any){
				"closID":           func(x any) { l.IntelRdt.ClosID = c.str(x) },
				"schemata":         func(x any) { l.IntelRdt.Schemata = c.strs(x) },
				"l3CacheSchema":    func(x any) { l.IntelRdt.L3CacheSchema = c.str(x) },
				"memBwSchema":      func(x any) { l.IntelRdt.MemBwSchema = c.str(x) },
				"enableMonitoring": func(x any) { l.IntelRdt.EnableMonitoring = c.bool(x) },
			})
		},
		"namespaces": func(x any) {
			a, ok := c.arr(x)
			if !ok {
				return
			}
			l.Namespaces = make([]specs.LinuxNamespace, len(a))
			for i, e := range a {
				n := &l.Namespaces[i]
				if eo := c.obj(e); eo != nil {
					c.fields(eo, map[string]func(any){
						"type": func(x any) { n.Type = specs.LinuxNamespaceType(c.str(x)) },
						"path": func(x any) { n.Path = c.str(x) },
					})
				}
			}
		},
	})
}

func (c *conv) devices(x any) []specs.LinuxDevice {
	a, ok := c.arr(x)
	if !ok {
		return nil
	}
	out := make([]specs.LinuxDevice, len(a))
	for i, e := range a {
		d := &out[i]
		if o := c.obj(e); o != nil {
			c.fields(o, map[string]func(any){
				"path":  func(x any) { d.Path = c.str(x) },
				"type":  func(x any) { d.Type = c.str(x) },
				"major": func(x any) { d.Major = c.i64z(x) },
				"minor": func(x any) { d.Minor = c.i64z(x) },
				"fileMode": func(x any) {
					if x != nil {
						m := os.FileMode(c.u32(x))
						d.FileMode = &m
					}
				},
				"uid": func(x any) { d.UID = c.u32p(x) },
				"gid": func(x any) { d.GID = c.u32p(x) },
			})
		}
	}
	return out
}

func (c *conv) rules(x any) []specs.LinuxDeviceCgroup {
	a, ok := c.arr(x)
	if !ok {
		return nil
	}
	out := make([]specs.LinuxDeviceCgroup, len(a))
	for i, e := range a {
		r := &out[i]
		if o := c.obj(e); o != nil {
			c.fields(o, map[string]func(any){
				"allow":  func(x any) { r.Allow = c.bool(x) },
				"type":   func(x any) { r.Type = c.str(x) },
				"major":  func(x any) { r.Major = c.i64p(x) },
				"minor":  func(x any) { r.Minor = c.i64p(x) },
				"access": func(x any) { r.Access = c.str(x) },
			})
		}
	}
	return out
}
