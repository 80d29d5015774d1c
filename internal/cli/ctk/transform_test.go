package ctk

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/app"
)

// TestCDITransformRoot: a spec generated under a driver root, moved to /
// (as for a driver container's /run/nvidia/driver), names host paths
// without the root; the container side is untouched; bad flags fail.
func TestCDITransformRoot(t *testing.T) {
	root := cdiTestRoot(t)
	spec, stderr, code := cdiRun(t, nil, "cdi", "generate", "--driver-root", root, "--format", "json")
	if code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	in := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(in, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	for _, tc := range []struct {
		name    string
		stdin   string
		args    []string
		outFile string // the file written, "" for stdout
		check   func(t *testing.T, out string)
		wantErr string
	}{
		{name: "host from file", args: []string{"--from", root, "--to", "/", "--input", in}, check: func(t *testing.T, out string) {
			s := parseSpecOut(t, []byte(out))
			for _, m := range s.ContainerEdits.Mounts {
				if strings.HasPrefix(m.HostPath, root) {
					t.Errorf("mount hostPath %s still under the root", m.HostPath)
				}
			}
			for _, n := range s.Devices[0].ContainerEdits.DeviceNodes {
				if n.HostPath != n.Path {
					t.Errorf("node %s: hostPath %s", n.Path, n.HostPath)
				}
			}
		}},
		{name: "container from stdin to file", stdin: spec, args: []string{"--from", "/usr/lib", "--to", "/lib",
			"--relative-to", "container", "--output", filepath.Join(outDir, "moved")}, outFile: filepath.Join(outDir, "moved.yaml"),
			check: func(t *testing.T, out string) {
				s := parseSpecOut(t, []byte(out))
				var dsts []string
				for _, m := range s.ContainerEdits.Mounts {
					dsts = append(dsts, m.ContainerPath)
				}
				if !strings.Contains(strings.Join(dsts, " "), "/lib/x86_64-linux-gnu/libcuda.so."+cdiTestVersion) {
					t.Errorf("container paths %q: libcuda not moved to /lib", dsts)
				}
				if !strings.Contains(strings.Join(dsts, " "), "/usr/bin/nvidia-smi") {
					t.Errorf("container paths %q: /usr/bin moved", dsts)
				}
			}},
		{name: "bad relative-to", args: []string{"--input", in, "--relative-to", "guest"}, wantErr: `--relative-to "guest"`},
		{name: "missing input", args: []string{"--input", filepath.Join(outDir, "nope")}, wantErr: "read the spec"},
		{name: "not a spec", stdin: "[", wantErr: "parse the spec"},
		{name: "invalid spec", stdin: "cdiVersion: 0.5.0\nkind: x\n", wantErr: "the spec -: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var so, se bytes.Buffer
			e := &app.Env{Args: append([]string{"nvidia-ctk", "cdi", "transform", "root"}, tc.args...),
				Stdin: strings.NewReader(tc.stdin), Stdout: &so, Stderr: &se, Environ: []string{"XDG_CONFIG_HOME=" + t.TempDir()}}
			code := Main(e)
			if tc.wantErr != "" {
				if code == 0 || !strings.Contains(se.String(), tc.wantErr) {
					t.Fatalf("exit %d, stderr %q, want an error with %q", code, se.String(), tc.wantErr)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, se.String())
			}
			out := so.String()
			if tc.outFile != "" {
				b, err := os.ReadFile(tc.outFile)
				if err != nil {
					t.Fatal(err)
				}
				out = string(b)
			}
			tc.check(t, out)
		})
	}
}
