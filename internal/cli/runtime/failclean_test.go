package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/fixture"
)

// envSpec is gpuSpec with its NVIDIA_VISIBLE_DEVICES entry replaced by env
// (JSON-encoded, so values may hold newlines).
func envSpec(t *testing.T, env ...string) string {
	t.Helper()
	var quoted []string
	for _, kv := range env {
		b, err := json.Marshal(kv)
		if err != nil {
			t.Fatal(err)
		}
		quoted = append(quoted, string(b))
	}
	return strings.Replace(gpuSpec, `"NVIDIA_VISIBLE_DEVICES=all"`, strings.Join(quoted, ", "), 1)
}

// TestHostileInputsFailClean: hostile env values and a driver root with a
// FIFO where discovery reads give a short, one-line error naming the
// variable or file, quickly, with config.json and the rootfs unchanged and
// nothing exec'd; a stderr pipe that nobody drains does not block the
// runtime (a 100 KB NVIDIA_REQUIRE_CUDA used to be echoed whole, 200 KB,
// and hung the create).
func TestHostileInputsFailClean(t *testing.T) {
	fx := fixture.Build(t, fixture.Spec{GPUs: 1})
	hugeRequire := "NVIDIA_REQUIRE_CUDA=" + strings.Repeat("cuda>=12.0 brand=tesla,driver>=470 ", 3000) // ~105 KB
	tests := []struct {
		name string
		env  []string
		fifo string // a driver root file replaced by a FIFO
		want []string
	}{
		{name: "100 KB NVIDIA_REQUIRE_CUDA", env: []string{"NVIDIA_VISIBLE_DEVICES=all", hugeRequire},
			want: []string{"requirement error", "NVIDIA_REQUIRE_CUDA", "value too long"}},
		{name: "newlines in NVIDIA_VISIBLE_DEVICES", env: []string{"NVIDIA_VISIBLE_DEVICES=0\nlevel=error msg=forged\n"},
			want: []string{`0\nlevel=error msg=forged: unknown device`}},
		{name: "only separators", env: []string{"NVIDIA_VISIBLE_DEVICES=,"},
			want: []string{"input error", "NVIDIA_VISIBLE_DEVICES", "only separators"}},
		{name: "FIFO version file", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, fifo: "/proc/driver/nvidia/version",
			want: []string{"/proc/driver/nvidia/version", "not a regular file: a FIFO"}},
		{name: "FIFO GPU information", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, fifo: fx.GPUs[0].ProcDir + "/information",
			want: []string{fx.GPUs[0].ProcDir + "/information", "not a regular file: a FIFO"}},
		{name: "FIFO /proc/devices", env: []string{"NVIDIA_VISIBLE_DEVICES=all"}, fifo: "/proc/devices",
			want: []string{"/proc/devices", "not a regular file: a FIFO"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fx.Path
			if tt.fifo != "" {
				root = fixture.Build(t, fixture.Spec{GPUs: 1}).Path
				p := filepath.Join(root, tt.fifo)
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mkfifo(p, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			bundle := writeBundle(t, envSpec(t, tt.env...))
			before := readFile(t, filepath.Join(bundle, "config.json"))
			h := newHarness(t)
			h.rt.planner = defaultPlanner()
			h.rt.LoadConfig = func(*app.Env) (*config.Config, error) {
				c := config.Default()
				c.Runtime.Runtimes = []string{h.runc}
				c.CLI.Root = root
				return c, nil
			}
			// stderr is a pipe nobody reads: a message larger than its
			// buffer would block the runtime for good.
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer pr.Close()
			defer pw.Close()
			logFile := filepath.Join(t.TempDir(), "log.json")
			e := &app.Env{Args: []string{"nvidia-container-runtime", "--log", logFile, "--log-format", "json", "create", "--bundle", bundle, "ctr"},
				Stdout: &h.stdout, Stderr: pw, Environ: []string{"PATH=/usr/bin:/bin"}}
			done := make(chan int, 1)
			start := time.Now()
			go func() { done <- h.rt.Run(e) }()
			select {
			case code := <-done:
				if code != 1 {
					t.Fatalf("exit %d, want 1", code)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the runtime is still running after 5s")
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("took %v", d)
			}
			pw.Close()
			stderr, err := readAllTimeout(pr)
			if err != nil {
				t.Fatal(err)
			}
			if h.exec.called {
				t.Error("runtime exec'd after an error")
			}
			if after := readFile(t, filepath.Join(bundle, "config.json")); string(after) != string(before) {
				t.Error("config.json changed")
			}
			if entries, _ := os.ReadDir(filepath.Join(bundle, "rootfs")); len(entries) != 0 {
				t.Errorf("rootfs changed: %d entries", len(entries))
			}
			msg := strings.TrimSuffix(stderr, "\n")
			if strings.ContainsAny(msg, "\n\r") || len(msg) > 2048 {
				t.Errorf("stderr is not one short line (%d bytes): %.600q", len(msg), msg)
			}
			lines := logLines(t, logFile)
			if len(lines) != 1 || len(lines[0]["msg"]) > 2048 {
				t.Fatalf("log: %d lines, want one short error", len(lines))
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) || !strings.Contains(lines[0]["msg"], w) {
					t.Errorf("stderr %.600q or log %.600q lacks %q", msg, lines[0]["msg"], w)
				}
			}
		})
	}
}

// readAllTimeout reads r (a pipe whose writer is closed) to the end.
func readAllTimeout(f *os.File) (string, error) {
	if err := f.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if strings.Contains(err.Error(), "EOF") {
				return b.String(), nil
			}
			return b.String(), err
		}
	}
}

// TestLogFileBounded: one run writes at most maxLogBytes to a log file,
// whole records only.
func TestLogFileBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	f := &lazyFile{path: p, mode: 0o644}
	defer f.Close()
	rec := []byte(strings.Repeat("x", 999) + "\n")
	for range 2 * maxLogBytes / len(rec) {
		if n, err := f.Write(rec); err != nil || n != len(rec) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > maxLogBytes || st.Size()%int64(len(rec)) != 0 || st.Size() < maxLogBytes-int64(len(rec)) {
		t.Errorf("log is %d bytes, want whole records up to %d", st.Size(), maxLogBytes)
	}
}
