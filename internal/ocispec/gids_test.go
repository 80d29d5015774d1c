package ocispec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nctk/nctk/internal/plan"
)

// TestApplyAdditionalGIDs: the plan's AdditionalGIDs are appended to
// process.user.additionalGids, each once, keeping the groups there and
// the user's other fields; no AdditionalGIDs, no user edit.
func TestApplyAdditionalGIDs(t *testing.T) {
	tests := []struct {
		name string
		user string // process.user JSON, "" for none
		gids []uint32
		want []uint32
	}{
		{"no user", "", []uint32{44}, []uint32{44}},
		{"user without groups", `{"uid": 1000, "gid": 1000}`, []uint32{44, 45}, []uint32{44, 45}},
		{"groups kept, duplicates not added", `{"uid": 1000, "gid": 1000, "additionalGids": [10, 44]}`, []uint32{44, 45}, []uint32{10, 44, 45}},
		{"no gids", `{"uid": 1000, "gid": 1000, "additionalGids": [10]}`, nil, []uint32{10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := `{"cwd": "/", "args": ["sh"]}`
			if tt.user != "" {
				proc = `{"cwd": "/", "args": ["sh"], "user": ` + tt.user + `}`
			}
			doc, err := Parse("config.json", []byte(`{"ociVersion": "1.2.0", "process": `+proc+`, "root": {"path": "rootfs"}}`))
			if err != nil {
				t.Fatal(err)
			}
			p := &plan.Plan{Devices: []plan.Device{{Path: "/dev/gdrdrv", Major: 238, FileMode: 0o660, GID: 44}}, AdditionalGIDs: tt.gids}
			for range 2 { // idempotent
				if err := Apply(doc, p, HookConfig{}); err != nil {
					t.Fatal(err)
				}
			}
			data, err := doc.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			var s specs.Spec
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatal(err)
			}
			if got := s.Process.User.AdditionalGids; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("additionalGids = %v, want %v", got, tt.want)
			}
			if strings.Contains(tt.user, `"uid": 1000`) && (s.Process.User.UID != 1000 || s.Process.User.GID != 1000) {
				t.Errorf("user = %+v", s.Process.User)
			}
		})
	}
}
