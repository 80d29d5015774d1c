package cdispec

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/nctk/nctk/internal/hostfacts"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// fill sets every field reachable from v (pointers allocated, slices of
// two) to a distinct non-zero value.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	default:
		panic("fill: no rule for " + v.Type().String())
	}
}

// TestIndexCodecCoversEveryField fails when the CDI library's container
// edits gain a field the cache format does not carry (naming it): such an
// index would not be cached at all (encodeIndex refuses it), every create
// would load the specs.
func TestIndexCodecCoversEveryField(t *testing.T) {
	typ := reflect.TypeFor[cdispecs.ContainerEdits]()
	for i := range typ.NumField() {
		var e cdispecs.ContainerEdits
		n := 0
		fill(reflect.ValueOf(&e).Elem().Field(i), &n)
		idx := &specIndex{Version: specCacheVersion, Key: "k", Specs: []cdispecs.ContainerEdits{e}, Devices: map[string]indexedDevice{"a/b=c": {Edits: e}}}
		if _, err := encodeIndex(idx); err != nil {
			t.Errorf("ContainerEdits.%s (all of its fields set): %v", typ.Field(i).Name, err)
		}
	}
}

func TestIndexCodecRoundTrip(t *testing.T) {
	var full cdispecs.ContainerEdits
	n := 0
	fill(reflect.ValueOf(&full).Elem(), &n)
	mode, uid := os.FileMode(0o666|os.ModeDevice|os.ModeCharDevice), uint32(1<<32-1)
	timeout := -5
	odd := cdispecs.ContainerEdits{
		Env:         []string{}, // empty is not nil
		DeviceNodes: []*cdispecs.DeviceNode{nil, {Path: "/dev/x", Major: -1, Minor: 1 << 40, FileMode: &mode, UID: &uid}},
		Hooks:       []*cdispecs.Hook{{HookName: "createContainer", Path: "/h", Args: []string{"", "ü\x00\xff"}, Timeout: &timeout}},
		Mounts:      []*cdispecs.Mount{nil},
	}
	idx := &specIndex{
		Version: specCacheVersion, Key: "key",
		Specs:   []cdispecs.ContainerEdits{full, {}, odd},
		Devices: map[string]indexedDevice{"nvidia.com/gpu=0": {Spec: 2, Edits: odd}, "nvidia.com/gpu=all": {Spec: 0, Edits: full}},
		Errors:  []string{"spec x: bad"},
		Libs: map[string]hostfacts.Lib{
			"/usr/lib/libcuda.so.1": {Dev: 1, Ino: 2, Size: 3, Mtime: -4, Ctime: 5, SONAME: "libcuda.so.1", Flags: 0x303},
			"/usr/lib/notlib":       {NotLib: true},
		},
	}
	data, err := encodeIndex(idx)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, idx) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, idx)
	}
	again, _ := encodeIndex(back)
	if !bytes.Equal(again, data) {
		t.Error("encoding is not deterministic")
	}
	// Every truncation and the trailing byte are refused.
	for i := range len(data) {
		if _, err := decodeIndex(data[:i]); err == nil {
			t.Fatalf("truncated at %d of %d bytes: decoded", i, len(data))
		}
	}
	if _, err := decodeIndex(append(data, 0)); err == nil {
		t.Error("trailing byte accepted")
	}
	// A length beyond the file is refused before anything is allocated.
	huge := append([]byte(cacheMagic), 0x06, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if _, err := decodeIndex(huge); err == nil {
		t.Error("a length beyond the file accepted")
	}
	// A JSON cache file of an earlier version is not this format.
	if _, err := decodeIndex([]byte(`{"version":2,"key":"k","specs":[],"devices":{}}`)); err == nil {
		t.Error("a JSON cache file decoded")
	}
}

// FuzzDecodeIndex: no input makes decodeIndex panic, and whatever it
// accepts encodes and decodes back unchanged.
func FuzzDecodeIndex(f *testing.F) {
	var full cdispecs.ContainerEdits
	n := 0
	fill(reflect.ValueOf(&full).Elem(), &n)
	seed, err := encodeIndex(&specIndex{Version: 3, Key: "k", Specs: []cdispecs.ContainerEdits{full},
		Devices: map[string]indexedDevice{"a.io/b=c": {Edits: full}}, Libs: map[string]hostfacts.Lib{"/l": {SONAME: "l.so"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(cacheMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := decodeIndex(data)
		if err != nil {
			return
		}
		out, err := encodeIndex(idx)
		if err != nil {
			if errors.Is(err, errNotCacheable) {
				t.Fatalf("decoded index does not encode: %+v", idx)
			}
			t.Fatal(err)
		}
		back, err := decodeIndex(out)
		if err != nil || !reflect.DeepEqual(back, idx) {
			t.Fatalf("re-encoded index decodes to %+v, %v", back, err)
		}
	})
}
