package runtime

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nctk/nctk/internal/app"
	"github.com/nctk/nctk/internal/config"
	"github.com/nctk/nctk/internal/ocispec"
	"github.com/nctk/nctk/internal/plan"
)

// earlyHarness is a harness whose low-level runtime is a real process
// started as the wrapper starts runc: a script that opens config.json at
// once, says so (rec/opened), reads it to the end (rec/config.json),
// says that (rec/finished) and exits 7. Its planner waits until the script
// has config.json open before it answers, so that the runtime is known to
// have started, and opened config.json, before the wrapper edited it.
func earlyHarness(t *testing.T, p *plan.Plan, planErr error) (*harness, string, string) {
	t.Helper()
	h := newHarness(t)
	rec := t.TempDir()
	bundle := writeBundle(t, gpuSpec)
	h.runc = writeExecutable(t, filepath.Join(t.TempDir(), "runc"), `#!/bin/sh
exec 3< "`+bundle+`/config.json"
: > "`+rec+`/opened"
cat <&3 > "`+rec+`/config.json"
: > "`+rec+`/finished"
exit 7
`)
	h.rt.LoadConfig = func(e *app.Env) (*config.Config, error) {
		c := config.Default()
		c.Runtime.Runtimes = []string{h.runc}
		return c, nil
	}
	h.rt.Start = newRelay().start
	h.rt.planner = preparerFunc(func(_ context.Context, in input) (*plan.Plan, error) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(rec, "opened")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the low-level runtime did not open config.json before the plan was made")
				break
			}
			time.Sleep(time.Millisecond)
		}
		return p, planErr
	})
	return h, bundle, rec
}

// devicePlan is a plan with nothing to do after the create: a device.
func devicePlan() *plan.Plan {
	return &plan.Plan{Devices: []plan.Device{{Path: "/dev/nvidia0", Major: 195, Minor: 0, FileMode: 0o666}}}
}

// bundleEntries lists the bundle directory (leftover pipes, links or
// temporary files would show).
func bundleEntries(t *testing.T, bundle string) []string {
	t.Helper()
	ents, err := os.ReadDir(bundle)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Fatalf("%s is not a regular file (mode %o)", path, st.Mode)
	}
	return st.Ino
}

// TestEarlyStart: on a create with a pid file the low-level runtime starts
// before config.json is edited, reads the edited config.json through the
// pipe that stood in for it, and its exit status is the wrapper's; the
// bundle ends with config.json, edited, and nothing else new.
func TestEarlyStart(t *testing.T) {
	h, bundle, rec := earlyHarness(t, devicePlan(), nil)
	code := h.run("create", "--bundle", bundle, "--pid-file", filepath.Join(t.TempDir(), "pid"), "ctr1")
	if code != 7 {
		t.Fatalf("exit %d (stderr %q), want the runtime's 7", code, h.stderr.String())
	}
	if h.exec.called {
		t.Error("the low-level runtime was exec'ed too")
	}
	final := readFile(t, filepath.Join(bundle, "config.json"))
	if got := readFile(t, filepath.Join(rec, "config.json")); string(got) != string(final) {
		t.Fatalf("the runtime read:\n%s\nconfig.json holds:\n%s", got, final)
	}
	doc, err := ocispec.Parse("config.json", final)
	if err != nil {
		t.Fatal(err)
	}
	if devs := doc.Spec().Linux.Devices; len(devs) != 1 || devs[0].Path != "/dev/nvidia0" {
		t.Fatalf("config.json devices %+v, want the plan's", devs)
	}
	inode(t, filepath.Join(bundle, "config.json"))
	if names := bundleEntries(t, bundle); strings.Join(names, " ") != "config.json rootfs" {
		t.Fatalf("bundle holds %q", names)
	}
}

// TestEarlyStartFails: when the wrapper fails after starting the runtime,
// the runtime is killed before it read anything, config.json is the
// original file again, and the wrapper's error is the answer.
func TestEarlyStartFails(t *testing.T) {
	h, bundle, rec := earlyHarness(t, nil, errors.New("planner says no"))
	before := inode(t, filepath.Join(bundle, "config.json"))
	code := h.run("create", "--bundle", bundle, "--pid-file", filepath.Join(t.TempDir(), "pid"), "ctr1")
	if code != 1 || !strings.Contains(h.stderr.String(), "planner says no") {
		t.Fatalf("exit %d, stderr %q; want 1 and the planner's error", code, h.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(rec, "finished")); err == nil {
		t.Fatal("the runtime read config.json to the end and went on")
	}
	if got, _ := os.ReadFile(filepath.Join(rec, "config.json")); len(got) != 0 {
		t.Fatalf("the runtime read %q", got)
	}
	checkOriginal(t, bundle, before)
}

// checkOriginal: the bundle's config.json is the original file (inode
// before, gpuSpec's bytes), and the bundle holds nothing new.
func checkOriginal(t *testing.T, bundle string, before uint64) {
	t.Helper()
	if got := string(readFile(t, filepath.Join(bundle, "config.json"))); got != gpuSpec {
		t.Fatalf("config.json:\n%s\nwant the original", got)
	}
	if after := inode(t, filepath.Join(bundle, "config.json")); after != before {
		t.Fatalf("config.json is inode %d, want the original file %d", after, before)
	}
	if names := bundleEntries(t, bundle); strings.Join(names, " ") != "config.json rootfs" {
		t.Fatalf("bundle holds %q", names)
	}
}

// TestEarlyStartAfterKill: a bundle whose config.json an earlier wrapper,
// killed (SIGKILL) in its early start, left as the pipe, with the original
// under the hard link named after it: the next create puts the original
// back and goes on from it, leaving nothing of the earlier one behind.
func TestEarlyStartAfterKill(t *testing.T) {
	h, bundle, rec := earlyHarness(t, devicePlan(), nil)
	spec := filepath.Join(bundle, "config.json")
	c := exec.Command("/bin/sh", "-c", "exit 0")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(bundle, ".config.json.nctk-orig-"+strconv.Itoa(c.Process.Pid)+"-x")
	if err := os.Link(spec, saved); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(bundle, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, spec); err != nil {
		t.Fatal(err)
	}
	code := h.run("create", "--bundle", bundle, "--pid-file", filepath.Join(t.TempDir(), "pid"), "ctr1")
	if code != 7 {
		t.Fatalf("exit %d (stderr %q), want the runtime's 7", code, h.stderr.String())
	}
	final := readFile(t, spec)
	if got := readFile(t, filepath.Join(rec, "config.json")); string(got) != string(final) || !strings.Contains(string(final), "/dev/nvidia0") {
		t.Fatalf("the runtime read:\n%s\nconfig.json holds:\n%s\nwant both edited", got, final)
	}
	if names := bundleEntries(t, bundle); strings.Join(names, " ") != "config.json rootfs" {
		t.Fatalf("bundle holds %q", names)
	}
}

// TestEarlyStartNothingToDo: a container that looked like a GPU one but
// gets no plan: the runtime reads the original, which stays the same file.
func TestEarlyStartNothingToDo(t *testing.T) {
	h, bundle, rec := earlyHarness(t, nil, nil)
	before := inode(t, filepath.Join(bundle, "config.json"))
	code := h.run("create", "--bundle", bundle, "--pid-file", filepath.Join(t.TempDir(), "pid"), "ctr1")
	if code != 7 {
		t.Fatalf("exit %d (stderr %q), want the runtime's 7", code, h.stderr.String())
	}
	if got := string(readFile(t, filepath.Join(rec, "config.json"))); got != gpuSpec {
		t.Fatalf("the runtime read:\n%s\nwant the original", got)
	}
	checkOriginal(t, bundle, before)
}

// TestStartsEarly: by default only runc is started before config.json is
// final; a container that asks for nothing is never.
func TestStartsEarly(t *testing.T) {
	r := &Runtime{}
	for rt, want := range map[string]bool{"/usr/bin/runc": true, "/usr/bin/docker-runc": true, "/usr/bin/crun": false, "/opt/runc-wrapper": false} {
		if got := r.startsEarly(rt); got != want {
			t.Errorf("startsEarly(%s) = %v, want %v", rt, got, want)
		}
	}
	cfg := config.Default()
	for _, tt := range []struct {
		spec string
		want bool
	}{
		{gpuSpec, true},
		{plainSpec, false},
		{strings.Replace(gpuSpec, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void", 1), false},
	} {
		doc, err := ocispec.Parse("config.json", []byte(tt.spec))
		if err != nil {
			t.Fatal(err)
		}
		if got := mayInject(doc.Spec(), cfg); got != tt.want {
			t.Errorf("mayInject(%s) = %v, want %v", tt.spec, got, tt.want)
		}
	}
}

// TestEarlyStartExecFails: a runtime that cannot be started (its
// interpreter is missing) is not started early: config.json is the
// original file again, and the create goes on as without the early start
// (edited config.json, the runtime exec'ed, which reports the failure).
func TestEarlyStartExecFails(t *testing.T) {
	h := newHarness(t)
	h.runc = writeExecutable(t, filepath.Join(t.TempDir(), "runc"), "#!/nonexistent/interpreter\n")
	h.rt.LoadConfig = func(e *app.Env) (*config.Config, error) {
		c := config.Default()
		c.Runtime.Runtimes = []string{h.runc}
		return c, nil
	}
	h.rt.Start = newRelay().start
	h.rt.planner = preparerFunc(func(context.Context, input) (*plan.Plan, error) { return devicePlan(), nil })
	bundle := writeBundle(t, gpuSpec)
	if code := h.run("create", "--bundle", bundle, "--pid-file", filepath.Join(t.TempDir(), "pid"), "ctr1"); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, h.stderr.String())
	}
	if !h.exec.called || h.exec.path != h.runc {
		t.Fatalf("exec %+v, want %s exec'ed", h.exec, h.runc)
	}
	inode(t, filepath.Join(bundle, "config.json"))
	doc, err := ocispec.Load(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if devs := doc.Spec().Linux.Devices; len(devs) != 1 {
		t.Fatalf("config.json devices %+v, want the plan's", devs)
	}
	if names := bundleEntries(t, bundle); strings.Join(names, " ") != "config.json rootfs" {
		t.Fatalf("bundle holds %q", names)
	}
}

// TestEarlyEnd: how the early start ends after the wrapper's work: an
// error before config.json was final kills the runtime and puts the
// original back; one after it waits for the runtime and deletes what it
// created; no error and no edit hands over the original.
func TestEarlyEnd(t *testing.T) {
	for _, tt := range []struct {
		name        string
		err         error
		commit      bool // config.json made final before the end
		status      int  // the runtime's
		wantKilled  bool
		wantDeleted bool
		wantErr     bool
		wantOrig    bool // config.json holds the original at the end
	}{
		{name: "failed before the commit", err: errors.New("x"), wantKilled: true, wantErr: true, wantOrig: true},
		{name: "failed after the commit", err: errors.New("x"), commit: true, wantDeleted: true, wantErr: true},
		{name: "failed after the commit, runtime failed too", err: errors.New("x"), commit: true, status: 1, wantErr: true},
		{name: "no edit", wantOrig: true},
		{name: "committed", commit: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bundle := writeBundle(t, gpuSpec)
			specPath := filepath.Join(bundle, "config.json")
			c := &fakeChild{run: func() (int, error) { return tt.status, nil }}
			deleted := false
			// ready must come before the runtime gets a document:
			// while config.json is still the pipe.
			readied := false
			ready := func() {
				fi, err := os.Lstat(specPath)
				readied = err == nil && fi.Mode()&os.ModeNamedPipe != 0
			}
			x, err := startEarly(specPath, func() (rtChild, error) { return c, nil }, func() error { deleted = true; return nil }, ready)
			if err != nil {
				t.Fatal(err)
			}
			if tt.commit {
				doc, err := ocispec.Parse(specPath, []byte(plainSpec))
				if err != nil {
					t.Fatal(err)
				}
				if err := x.commit(doc); err != nil {
					t.Fatal(err)
				}
			}
			err = x.end(tt.err, []byte(gpuSpec))
			if (err != nil) != tt.wantErr || c.killed != tt.wantKilled || deleted != tt.wantDeleted {
				t.Fatalf("end: error %v, killed %v, deleted %v; want error %v, killed %v, deleted %v",
					err, c.killed, deleted, tt.wantErr, tt.wantKilled, tt.wantDeleted)
			}
			if fed := tt.commit || tt.err == nil; readied != fed {
				t.Fatalf("signals readied before config.json was given: %v, want %v", readied, fed)
			}
			got := string(readFile(t, specPath))
			inode(t, specPath)
			if (got == gpuSpec) != tt.wantOrig {
				t.Fatalf("config.json holds the original: %v, want %v", got == gpuSpec, tt.wantOrig)
			}
		})
	}
}
