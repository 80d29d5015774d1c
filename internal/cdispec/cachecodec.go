package cdispec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"

	"github.com/nctk/nctk/internal/hostfacts"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// The resolved-spec cache file is binary: decoding its 25–30 KB (8 GPUs)
// with encoding/json cost ~0.8 ms of every create's CPU in a fresh process
// (reflection tables built cold, every string unquoted), this format about
// a tenth of that. It is a private file (owner-only, in the runtime's own
// directory, keyed and versioned), not an interchange format.
//
// Layout: cacheMagic, then the fields of specIndex in order. Integers are
// varints; a string is its length and bytes; a list, map or pointer that
// may be nil is its length plus one (0: nil), a pointer 0 when nil and 1
// before its value. Maps are written in key order.
//
// encodeIndex checks that decoding gives back exactly what was encoded
// (reflect.DeepEqual): a field this codec does not know — one a newer CDI
// library adds to ContainerEdits — makes the index uncacheable instead of
// silently dropped; TestIndexCodecCoversEveryField names the field.

const cacheMagic = "nctk-cdi-cache\n"

// errNotCacheable: the index holds something the codec cannot carry.
var errNotCacheable = errors.New("CDI spec cache: edits the cache format does not carry")

// encodeIndex returns idx in the cache format.
func encodeIndex(idx *specIndex) ([]byte, error) {
	data, _, err := encodeChecked(idx)
	return data, err
}

// encodeChecked returns idx in the cache format and what decoding that
// gives (equal to idx: a copy sharing nothing with it).
func encodeChecked(idx *specIndex) ([]byte, *specIndex, error) {
	var w cacheWriter
	w.b = append(make([]byte, 0, 32<<10), cacheMagic...)
	w.int(int64(idx.Version))
	w.str(idx.Key)
	w.n(len(idx.Specs), idx.Specs == nil)
	for i := range idx.Specs {
		w.edits(&idx.Specs[i])
	}
	w.n(len(idx.Devices), idx.Devices == nil)
	for _, name := range slices.Sorted(maps.Keys(idx.Devices)) {
		d := idx.Devices[name]
		w.str(name)
		w.int(int64(d.Spec))
		w.edits(&d.Edits)
	}
	w.strs(idx.Errors)
	w.n(len(idx.Libs), idx.Libs == nil)
	for _, p := range slices.Sorted(maps.Keys(idx.Libs)) {
		w.str(p)
		w.lib(idx.Libs[p])
	}
	back, err := decodeIndex(w.b)
	if err != nil || !reflect.DeepEqual(back, idx) {
		return nil, nil, errNotCacheable
	}
	return w.b, back, nil
}

// decodeIndex parses data written by encodeIndex; any other content is
// an error (the caller then loads the specs).
func decodeIndex(data []byte) (*specIndex, error) {
	r, err := newCacheReader(data, cacheMagic, "CDI spec cache file")
	if err != nil {
		return nil, err
	}
	idx := &specIndex{Version: int(r.int()), Key: r.str()}
	if n, ok := r.n(); ok {
		idx.Specs = make([]cdispecs.ContainerEdits, n)
		for i := range idx.Specs {
			r.edits(&idx.Specs[i])
		}
	}
	if n, ok := r.n(); ok {
		idx.Devices = make(map[string]indexedDevice, n)
		for range n {
			name := r.str()
			d := indexedDevice{Spec: int(r.int())}
			r.edits(&d.Edits)
			idx.Devices[name] = d
		}
	}
	idx.Errors = r.strs()
	if n, ok := r.n(); ok {
		idx.Libs = make(map[string]hostfacts.Lib, n)
		for range n {
			p := r.str()
			idx.Libs[p] = r.lib()
		}
	}
	if err := r.finish("CDI spec cache file"); err != nil {
		return nil, err
	}
	return idx, nil
}

type cacheWriter struct{ b []byte }

func (w *cacheWriter) uint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *cacheWriter) int(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *cacheWriter) str(s string)  { w.uint(uint64(len(s))); w.b = append(w.b, s...) }

func (w *cacheWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

// n writes a length, 0 for nil.
func (w *cacheWriter) n(n int, isNil bool) {
	if isNil {
		w.uint(0)
		return
	}
	w.uint(uint64(n) + 1)
}

func (w *cacheWriter) strs(l []string) {
	w.n(len(l), l == nil)
	for _, s := range l {
		w.str(s)
	}
}

func (w *cacheWriter) ptr(present bool) { w.n(0, !present) }

func (w *cacheWriter) lib(l hostfacts.Lib) {
	w.uint(l.Dev)
	w.uint(l.Ino)
	w.int(l.Size)
	w.int(l.Mtime)
	w.int(l.Ctime)
	w.str(l.SONAME)
	w.int(int64(l.Flags))
	w.bool(l.NotLib)
}

func (w *cacheWriter) edits(e *cdispecs.ContainerEdits) {
	w.strs(e.Env)
	writePtrs(w, e.DeviceNodes, func(d *cdispecs.DeviceNode) {
		w.str(d.Path)
		w.str(d.HostPath)
		w.str(d.Type)
		w.int(d.Major)
		w.int(d.Minor)
		if w.ptr(d.FileMode != nil); d.FileMode != nil {
			w.uint(uint64(*d.FileMode))
		}
		w.str(d.Permissions)
		if w.ptr(d.UID != nil); d.UID != nil {
			w.uint(uint64(*d.UID))
		}
		if w.ptr(d.GID != nil); d.GID != nil {
			w.uint(uint64(*d.GID))
		}
	})
	writePtrs(w, e.NetDevices, func(d *cdispecs.LinuxNetDevice) {
		w.str(d.HostInterfaceName)
		w.str(d.Name)
	})
	writePtrs(w, e.Hooks, func(h *cdispecs.Hook) {
		w.str(h.HookName)
		w.str(h.Path)
		w.strs(h.Args)
		w.strs(h.Env)
		if w.ptr(h.Timeout != nil); h.Timeout != nil {
			w.int(int64(*h.Timeout))
		}
	})
	writePtrs(w, e.Mounts, func(m *cdispecs.Mount) {
		w.str(m.HostPath)
		w.str(m.ContainerPath)
		w.strs(m.Options)
		w.str(m.Type)
	})
	if w.ptr(e.IntelRdt != nil); e.IntelRdt != nil {
		w.str(e.IntelRdt.ClosID)
		w.str(e.IntelRdt.L3CacheSchema)
		w.str(e.IntelRdt.MemBwSchema)
		w.strs(e.IntelRdt.Schemata)
		w.bool(e.IntelRdt.EnableMonitoring)
	}
	w.n(len(e.AdditionalGIDs), e.AdditionalGIDs == nil)
	for _, g := range e.AdditionalGIDs {
		w.uint(uint64(g))
	}
}

// writePtrs writes a list of pointers: its length (nil: 0), then for each
// element its presence and, when present, what write writes of it.
func writePtrs[T any](w *cacheWriter, l []*T, write func(*T)) {
	w.n(len(l), l == nil)
	for _, x := range l {
		if w.ptr(x != nil); x != nil {
			write(x)
		}
	}
}

// cacheReader reads what cacheWriter wrote; the first error sticks and
// every later read returns zero values.
type cacheReader struct {
	b   []byte
	err error
}

// newCacheReader reads data after its magic line (what names the file
// kind in errors).
func newCacheReader(data []byte, magic, what string) (*cacheReader, error) {
	rest, ok := bytes.CutPrefix(data, []byte(magic))
	if !ok {
		return nil, fmt.Errorf("not a %s", what)
	}
	return &cacheReader{b: rest}, nil
}

// finish returns the first error of the reads, or an error when data is
// left over.
func (r *cacheReader) finish(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes of trailing data", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("%s: %w", what, r.err)
	}
	return nil
}

func (r *cacheReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *cacheReader) uint() uint64 { return readVarint(r, binary.Uvarint) }
func (r *cacheReader) int() int64   { return readVarint(r, binary.Varint) }

// readVarint reads one integer with decode (binary.Uvarint or Varint).
func readVarint[T uint64 | int64](r *cacheReader, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, k := decode(r.b)
	if k <= 0 {
		r.fail(errors.New("truncated or overlong integer"))
		return 0
	}
	r.b = r.b[k:]
	return v
}

// u32 reads an unsigned integer that must fit 32 bits.
func (r *cacheReader) u32() uint32 {
	v := r.uint()
	if v > 1<<32-1 {
		r.fail(fmt.Errorf("%d out of range", v))
		return 0
	}
	return uint32(v)
}

func (r *cacheReader) str() string {
	n := r.uint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail(errors.New("truncated string"))
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *cacheReader) bool() bool { return r.flag("boolean") }

// flag reads a 0 or 1 (what: the kind of value, for the error).
func (r *cacheReader) flag(what string) bool {
	switch v := r.uint(); v {
	case 0, 1:
		return v == 1
	default:
		r.fail(fmt.Errorf("%d is no %s", v, what))
		return false
	}
}

// n reads a length; ok is false for nil. Each element takes at least one
// byte, so a length beyond what is left is refused before allocating.
func (r *cacheReader) n() (n int, ok bool) {
	v := r.uint()
	if r.err != nil || v == 0 {
		return 0, false
	}
	if v-1 > uint64(len(r.b)) {
		r.fail(fmt.Errorf("length %d beyond the file", v-1))
		return 0, false
	}
	return int(v - 1), true
}

func (r *cacheReader) lib() hostfacts.Lib {
	return hostfacts.Lib{Dev: r.uint(), Ino: r.uint(), Size: r.int(), Mtime: r.int(), Ctime: r.int(),
		SONAME: r.str(), Flags: int32(r.int()), NotLib: r.bool()}
}

// ptr reads a pointer's presence.
func (r *cacheReader) ptr() bool { return r.flag("presence mark") }

func (r *cacheReader) strs() []string {
	n, ok := r.n()
	if !ok {
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = r.str()
	}
	return l
}

func (r *cacheReader) edits(e *cdispecs.ContainerEdits) {
	e.Env = r.strs()
	e.DeviceNodes = readPtrs(r, func() *cdispecs.DeviceNode {
		d := &cdispecs.DeviceNode{Path: r.str(), HostPath: r.str(), Type: r.str(), Major: r.int(), Minor: r.int()}
		if r.ptr() {
			m := os.FileMode(r.u32())
			d.FileMode = &m
		}
		d.Permissions = r.str()
		if r.ptr() {
			v := r.u32()
			d.UID = &v
		}
		if r.ptr() {
			v := r.u32()
			d.GID = &v
		}
		return d
	})
	e.NetDevices = readPtrs(r, func() *cdispecs.LinuxNetDevice {
		return &cdispecs.LinuxNetDevice{HostInterfaceName: r.str(), Name: r.str()}
	})
	e.Hooks = readPtrs(r, func() *cdispecs.Hook {
		h := &cdispecs.Hook{HookName: r.str(), Path: r.str(), Args: r.strs(), Env: r.strs()}
		if r.ptr() {
			t := int(r.int())
			h.Timeout = &t
		}
		return h
	})
	e.Mounts = readPtrs(r, func() *cdispecs.Mount {
		return &cdispecs.Mount{HostPath: r.str(), ContainerPath: r.str(), Options: r.strs(), Type: r.str()}
	})
	if r.ptr() {
		e.IntelRdt = &cdispecs.IntelRdt{ClosID: r.str(), L3CacheSchema: r.str(), MemBwSchema: r.str(), Schemata: r.strs(), EnableMonitoring: r.bool()}
	}
	if n, ok := r.n(); ok {
		e.AdditionalGIDs = make([]uint32, n)
		for i := range e.AdditionalGIDs {
			e.AdditionalGIDs[i] = r.u32()
		}
	}
}

// readPtrs reads what writePtrs wrote, each present element with read.
func readPtrs[T any](r *cacheReader, read func() *T) []*T {
	n, ok := r.n()
	if !ok {
		return nil
	}
	l := make([]*T, n)
	for i := range l {
		if r.ptr() {
			l[i] = read()
		}
	}
	return l
}
