package parity

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCDITransformRoot runs `nvidia-ctk cdi transform root` with each
// command line of testdata/cli/transform-args.txt on transform-in.yaml (a
// spec written inside a driver container) and compares the spec it prints,
// one line per key, and its exit status with NVIDIA's.
func TestCDITransformRoot(t *testing.T) {
	ctk := tool(t, "nvidia-ctk")
	in, err := filepath.Abs(filepath.Join("testdata", "cli", "transform-in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, args := range readArgvCases(t, "cli/transform-args.txt") {
		argv := append([]string{"cdi", "transform", "root", "--input", in}, args...)
		cmd := exec.Command(ctk, argv...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + t.TempDir()}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		rc := exitCode(t, fmt.Sprint(args), cmd.Run())
		t.Logf("%q: exit %d\n%s", args, rc, stderr.String())
		fmt.Fprintf(&b, "== %s\nexit: %s\n", quoteArgs(args), exitClass(rc))
		if rc != 0 {
			continue
		}
		data, err := yaml.YAMLToJSON([]byte(stdout.String()))
		if err != nil {
			b.WriteString("output is not YAML: " + err.Error() + "\n")
			continue
		}
		for _, l := range flatten(t, "spec.json", data) {
			b.WriteString(l + "\n")
		}
	}
	golden(t, "cli/transform.golden", b.String(), nil, transformDifferences)
}

// transformDifferences turns NVIDIA's results into nctk's where nctk
// differs on purpose (docs/cdi-generate.md): NVIDIA's --from matches as a
// string prefix, so --from /run/nvidia also moves
// /run/nvidia-persistenced/socket (to /opt/-persistenced/socket, a path
// that does not exist); nctk moves paths at or below the root only.
func transformDifferences(s string) string {
	return strings.ReplaceAll(s, `"/opt/-persistenced/socket"`, `"/run/nvidia-persistenced/socket"`)
}
