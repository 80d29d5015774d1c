package ocispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// hasDuplicateKeys reports whether an object in the JSON data has a key
// twice (encoding/json merges the two into a struct, the generic tree keeps
// the last).
func hasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type level struct {
		obj  bool
		key  bool // the next string token is a key
		seen map[string]bool
	}
	var stack []*level
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) || err != nil {
			return false
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.key {
			if k, ok := tok.(string); ok {
				if top.seen[k] {
					return true
				}
				top.seen[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &level{obj: true, key: true, seen: map[string]bool{}})
			continue
		case json.Delim('['):
			stack = append(stack, &level{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].obj {
			stack[len(stack)-1].key = true
		}
	}
}

// checkViewOfTree: what viewOfTree accepts, encoding/json decodes the same.
func checkViewOfTree(t *testing.T, data []byte) (accepted bool) {
	t.Helper()
	tree, err := decodeTree(data)
	if err != nil {
		return false
	}
	got, ok := viewOfTree(tree)
	if !ok || hasDuplicateKeys(data) {
		return ok
	}
	var want fullView
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("converted from the tree, but encoding/json fails: %v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("from the tree\n%+v\nencoding/json\n%+v\ninput %s", got, &want, data)
	}
	return true
}

// TestViewOfTree: real config.json files are converted from the tree (no
// second decode), equal to encoding/json's result; shapes it leaves to
// encoding/json are refused.
func TestViewOfTree(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !checkViewOfTree(t, data) {
			t.Errorf("%s: not converted from the tree", f)
		}
	}
	for name, cfg := range cdiViewConfigs {
		if !checkViewOfTree(t, []byte(cfg)) {
			t.Errorf("%s: not converted from the tree", name)
		}
	}
	accepted := []string{
		`{}`,
		`{"process":null,"root":null,"mounts":null,"hooks":null,"linux":null,"annotations":null}`,
		`{"process":{"env":[],"user":{"uid":null,"additionalGids":[]}},"mounts":[],"annotations":{},"hooks":{},"linux":{"resources":{}}}`,
		`{"mounts":[null,{"destination":null,"options":[null,"ro"],"uidMappings":[{"containerID":0,"hostID":4294967295,"size":1}]}]}`,
		`{"linux":{"devices":[{"path":"/dev/x","major":-1,"minor":9223372036854775807,"fileMode":438,"uid":null}],"resources":{"devices":[{"allow":true,"major":null,"minor":-0}]}}}`,
		`{"hooks":{"createContainer":[{"path":"/h","timeout":-5}],"x":1},"linux":{"netDevices":{"a":null,"b":{"name":"c"}},"namespaces":[{"type":"user"}]}}`,
		`{"ociVersion":"1.2.0","x-root":{"path":1},"process":{"args":[1],"Env2":1}}`,
		`{"linux":{"intelRdt":{"closID":"a","schemata":["L3:0=f"],"enableMonitoring":true,"x":[]}}}`,
	}
	for _, cfg := range accepted {
		if !checkViewOfTree(t, []byte(cfg)) {
			t.Errorf("not converted from the tree: %s", cfg)
		}
	}
	refused := []string{
		`{"Root":{"path":"a"}}`,
		`{"root":{"PATH":"a"}}`,
		`{"process":{"env":"A=1"}}`,
		`{"process":{"user":{"uid":-1}}}`,
		`{"process":{"user":{"uid":4294967296}}}`,
		`{"linux":{"devices":[{"major":1.5}]}}`,
		`{"linux":{"devices":[{"major":1e3}]}}`,
		`{"linux":{"intelRdt":{"closID":1}}}`,
		`{"mounts":{"destination":"/a"}}`,
		`{"root":{"readonly":"yes"}}`,
		`{"annotations":{"a":1}}`,
	}
	for _, cfg := range refused {
		if checkViewOfTree(t, []byte(cfg)) {
			t.Errorf("converted from the tree, should be left to encoding/json: %s", cfg)
		}
	}
}

// FuzzViewOfTree: for any config.json, the view converted from the tree,
// when there is one, is encoding/json's.
func FuzzViewOfTree(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, cfg := range cdiViewConfigs {
		f.Add([]byte(cfg))
	}
	f.Add([]byte(`{"linux":{"devices":[{"path":"/dev/x","major":-1,"fileMode":438}]},"process":{"user":{"umask":18}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkViewOfTree(t, data)
	})
}
