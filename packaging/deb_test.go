package packaging

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/buildid"
	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/version"
)

// binaries are the programs the packages install in /usr/bin, links the
// other tool names, installed as links to one of them (scripts/build.sh).
var (
	binaries = []string{"nctk", "nctk-driverprobe", "nvidia-cdi-hook", "nvidia-container-runtime", "nvidia-container-runtime-hook"}
	links    = map[string]string{
		"nvidia-ctk":                      "nctk",
		"nvidia-docker":                   "nctk",
		"nvidia-container-runtime.cdi":    "nvidia-container-runtime",
		"nvidia-container-runtime.legacy": "nvidia-container-runtime",
		"nvidia-container-toolkit":        "nvidia-container-runtime-hook",
		"nvidia-container-cli":            "nvidia-container-runtime-hook",
	}
)

// checkInstalledFiles checks the files a package installed into root: the
// binaries (those the runtime path runs carry the installed hook binary's
// Go build ID: version.HookBuildID, how the runtime knows that hook binary
// for its own), the tool links, the udev rule and the units.
func checkInstalledFiles(t *testing.T, root string) {
	t.Helper()
	for _, p := range []string{udevRule, unitDir + "/" + units[0], unitDir + "/" + units[1]} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	for _, b := range binaries {
		if fi, err := os.Lstat(filepath.Join(root, "/usr/bin", b)); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
			t.Errorf("/usr/bin/%s: %v, %v; want a regular file, mode 0755", b, fi, err)
		}
	}
	hookID, err := buildid.Read(filepath.Join(root, "/usr/bin/nvidia-cdi-hook"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"nctk", "nvidia-container-runtime"} {
		if data, err := os.ReadFile(filepath.Join(root, "/usr/bin", b)); err != nil || !bytes.Contains(data, []byte(hookID)) {
			t.Errorf("the installed %s does not carry the installed nvidia-cdi-hook's build ID %s (%v)", b, hookID, err)
		}
	}
	for name, target := range links {
		if l, err := os.Readlink(filepath.Join(root, "/usr/bin", name)); err != nil || l != target {
			t.Errorf("/usr/bin/%s: link %q, %v; want -> %s", name, l, err, target)
		}
	}
}

// nvidiaPackages are the packages nctk provides, conflicts with and
// replaces.
var nvidiaPackages = []string{"nvidia-container-toolkit", "nvidia-container-toolkit-base",
	"libnvidia-container-tools", "libnvidia-container1"}

const (
	configFile = "/etc/nvidia-container-runtime/config.toml"
	unitDir    = "/usr/lib/systemd/system"
	udevRule   = "/usr/lib/udev/rules.d/60-nvidia-cdi-refresh.rules"
)

var units = []string{"nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"}

// TestDeb builds the package as `make deb` does (twice, the second a newer
// version), checks its control fields and conffile, then installs it with
// dpkg into a temporary root (its own admin dir; maintainer scripts run
// chrootless, so the host is not touched), has systemd-analyze verify the
// installed units, upgrades it over an edited config.toml, removes and
// purges it.
func TestDeb(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skipf("dpkg-deb is not installed (%v): the package cannot be built", err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := e2e.BuildNctk(bin); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	deb1 := buildDeb(t, repo, bin, out, "")
	deb2 := buildDeb(t, repo, bin, out, version.Version+"+test1")
	if want := "nctk_" + version.Version + "_"; !strings.HasPrefix(filepath.Base(deb1), want) {
		t.Errorf("package file %s, want %s<arch>.deb", filepath.Base(deb1), want)
	}

	t.Run("control", func(t *testing.T) {
		fields := map[string]string{}
		for _, f := range []string{"Package", "Version", "Provides", "Conflicts", "Replaces", "Depends"} {
			fields[f] = strings.TrimSpace(runOK(t, "", nil, "dpkg-deb", "-f", deb1, f))
		}
		if fields["Package"] != "nctk" || fields["Version"] != version.Version {
			t.Errorf("Package %q Version %q, want nctk %s", fields["Package"], fields["Version"], version.Version)
		}
		for _, p := range nvidiaPackages {
			if !strings.Contains(fields["Provides"], p+" (= "+version.NVIDIACompat+")") {
				t.Errorf("Provides %q lacks %s (= %s)", fields["Provides"], p, version.NVIDIACompat)
			}
			for _, f := range []string{"Conflicts", "Replaces"} {
				if !listHas(fields[f], p) {
					t.Errorf("%s %q lacks %s", f, fields[f], p)
				}
			}
		}
		if got := strings.TrimSpace(runOK(t, "", nil, "dpkg-deb", "-I", deb1, "conffiles")); got != configFile {
			t.Errorf("conffiles %q, want %s", got, configFile)
		}
	})

	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skipf("dpkg is not installed (%v): the package is built but not installed", err)
	}
	root := filepath.Join(t.TempDir(), "root")
	dpkg := newDpkgRoot(t, root)

	dpkg("-i", deb1)
	if got := dpkgStatus(t, root); !strings.Contains(got, "Status: install ok installed") || !strings.Contains(got, "Version: "+version.Version+"\n") {
		t.Fatalf("after install, status:\n%s", got)
	}
	checkInstalledFiles(t, root)
	ctk := filepath.Join(root, "/usr/bin/nvidia-ctk")
	if got := runOK(t, "", nil, ctk, "--version"); !strings.Contains(got, version.Version) {
		t.Errorf("installed nvidia-ctk --version: %q", got)
	}
	cfg, err := os.ReadFile(filepath.Join(root, configFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := runOK(t, "", nil, ctk, "config", "default"); string(cfg) != want {
		t.Errorf("installed config.toml is not `nvidia-ctk config default`:\n%s\nwant:\n%s", cfg, want)
	}

	t.Run("systemd-analyze verify", func(t *testing.T) { verifyUnits(t, root) })
	t.Run("refresh service", func(t *testing.T) { refreshService(t, root) })

	// Upgrade over an edited config.toml: dpkg keeps the admin's file
	// (the packaged one did not change, so without asking).
	edited := append(bytes.Clone(cfg), "\n# edited by the admin\n"...)
	if err := os.WriteFile(filepath.Join(root, configFile), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg("-i", deb2)
	if got := dpkgStatus(t, root); !strings.Contains(got, "Status: install ok installed") || !strings.Contains(got, "Version: "+version.Version+"+test1\n") {
		t.Fatalf("after upgrade, status:\n%s", got)
	}
	if got, err := os.ReadFile(filepath.Join(root, configFile)); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("upgrade did not keep the edited config.toml (%v):\n%s", err, got)
	}

	// Remove: the binaries, units and the refresh service's spec go, the
	// edited conffile stays.
	spec := filepath.Join(root, "/var/run/cdi/nvidia.yaml")
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte("cdiVersion: 0.5.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg("-r", "nctk")
	if got := dpkgStatus(t, root); !strings.Contains(got, "Status: deinstall ok config-files") {
		t.Errorf("after remove, status:\n%s", got)
	}
	for _, p := range []string{"/usr/bin/nctk", "/usr/bin/nvidia-ctk", udevRule, unitDir + "/" + units[0], "/var/run/cdi/nvidia.yaml"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after remove (%v)", p, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(root, configFile)); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("remove did not keep the edited config.toml (%v)", err)
	}

	// Purge: the conffile and its directory go, dpkg forgets the package.
	dpkg("-P", "nctk")
	for _, p := range []string{configFile, filepath.Dir(configFile)} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after purge (%v)", p, err)
		}
	}
	if got := dpkgStatus(t, root); strings.Contains(got, "Package: nctk") {
		t.Errorf("dpkg still knows nctk after purge:\n%s", got)
	}
}

// buildDeb runs packaging/build-deb.sh (with DEB_VERSION when v is not "")
// and returns the package it wrote.
func buildDeb(t *testing.T, repo, bin, out, v string) string {
	t.Helper()
	var env []string
	if v != "" {
		env = append(env, "DEB_VERSION="+v)
	}
	deb := strings.TrimSpace(runOK(t, repo, env, "packaging/build-deb.sh", bin, out))
	if filepath.Dir(deb) != out || !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("build-deb.sh printed %q, want a .deb in %s", deb, out)
	}
	return deb
}

// newDpkgRoot makes an empty dpkg database under root (holding only a
// stand-in libc6, the package's one dependency) and returns a function
// that runs dpkg on it. Maintainer scripts run chrootless with DPKG_ROOT
// set, which the scripts honour.
func newDpkgRoot(t *testing.T, root string) func(args ...string) {
	admin := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{"info", "updates", "triggers"} {
		if err := os.MkdirAll(filepath.Join(admin, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"status": "Package: libc6\nStatus: install ok installed\nPriority: optional\nVersion: 2.36\n" +
			"Architecture: all\nMaintainer: test <test@example.invalid>\nDescription: stand-in for the test\n\n",
		"available":       "",
		"info/libc6.list": "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(admin, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"--root=" + root, "--force-script-chrootless"}
	if os.Geteuid() != 0 {
		base = append(base, "--force-not-root")
	}
	return func(args ...string) {
		t.Helper()
		runOK(t, "", []string{"PATH=" + os.Getenv("PATH") + ":/usr/sbin:/sbin"}, "dpkg", append(base, args...)...)
	}
}

// dpkgStatus is the root's dpkg status file.
func dpkgStatus(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// verifyUnits runs systemd-analyze verify on the installed units in a
// root of their own that also holds the host's units (their default
// dependencies: sysinit.target, …) and the installed nvidia-ctk (whose
// ExecStart it checks). A unit with a relative ExecStart must fail the
// same way, so that a verify that checks nothing is noticed.
func verifyUnits(t *testing.T, installed string) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze is not installed (%v): units not verified", err)
	}
	var hostUnits string
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil {
			hostUnits = d
			break
		}
	}
	if hostUnits == "" {
		t.Skip("this host has no systemd units (sysinit.target): units not verified")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, unitDir), 0o755); err != nil {
		t.Fatal(err)
	}
	runOK(t, "", nil, "cp", "-a", hostUnits+"/.", filepath.Join(root, unitDir)+"/")
	for _, u := range units {
		runOK(t, "", nil, "cp", filepath.Join(installed, unitDir, u), filepath.Join(root, unitDir, u))
	}
	if err := os.MkdirAll(filepath.Join(root, "/usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	runOK(t, "", nil, "cp", filepath.Join(installed, "/usr/bin/nctk"), filepath.Join(root, "/usr/bin/nctk"))
	if err := os.Symlink("nctk", filepath.Join(root, "/usr/bin/nvidia-ctk")); err != nil {
		t.Fatal(err)
	}
	args := []string{"verify", "--man=no", "--root=" + root}
	for _, u := range units {
		args = append(args, unitDir+"/"+u)
	}
	runOK(t, "", nil, sa, args...)

	bad := filepath.Join(root, unitDir, "nctk-test-bad.service")
	if err := os.WriteFile(bad, []byte("[Service]\nType=oneshot\nExecStart=nvidia-ctk-relative cdi generate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", "--man=no", "--root="+root, unitDir+"/nctk-test-bad.service").CombinedOutput(); err == nil {
		t.Errorf("systemd-analyze verify accepts a broken unit; output:\n%s", out)
	}
}

// refreshService runs the installed nvidia-cdi-refresh.service's
// ExecStart, with its Environment= and the overrides an environment file
// would give (the output file, a fixture driver root), and checks with the
// installed `nvidia-ctk cdi validate` that the spec it writes is fresh, goes
// stale when a GPU is removed, and is fresh again after the next run.
func refreshService(t *testing.T, installed string) {
	data, err := os.ReadFile(filepath.Join(installed, unitDir, "nvidia-cdi-refresh.service"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	var execStart []string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			env = append(env, v)
		}
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			execStart = strings.Fields(v)
		}
	}
	if len(execStart) == 0 || execStart[0] != "/usr/bin/nvidia-ctk" || !slices.Contains(env, "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml") {
		t.Fatalf("service: ExecStart %q, Environment %q; want /usr/bin/nvidia-ctk writing /var/run/cdi/nvidia.yaml", execStart, env)
	}
	driver := filepath.Join(t.TempDir(), "driver")
	if _, err := fixture.BuildAt(driver, fixture.Spec{GPUs: 2}); err != nil {
		t.Skipf("fixture driver root: %v", err)
	}
	specDir := t.TempDir()
	env = append(env, "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH="+filepath.Join(specDir, "nvidia.yaml"),
		"NVIDIA_CTK_DRIVER_ROOT="+driver, "XDG_CONFIG_HOME="+t.TempDir())
	ctk := filepath.Join(installed, execStart[0])
	refresh := func() { runOK(t, "", env, ctk, execStart[1:]...) }
	validate := func() error {
		cmd := exec.Command(ctk, "cdi", "validate", "--spec-dir="+specDir)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		t.Logf("cdi validate: %v\n%s", err, out)
		return err
	}
	refresh()
	if err := validate(); err != nil {
		t.Fatalf("the refreshed spec is not fresh: %v", err)
	}
	if err := os.RemoveAll(driver); err != nil {
		t.Fatal(err)
	}
	if _, err := fixture.BuildAt(driver, fixture.Spec{GPUs: 1}); err != nil {
		t.Fatal(err)
	}
	if err := validate(); err == nil {
		t.Fatal("cdi validate accepts the spec of a removed GPU")
	}
	refresh()
	if err := validate(); err != nil {
		t.Fatalf("the spec is stale after a refresh: %v", err)
	}
}

// runOK runs a command (in dir when not "", with env added) and returns
// its stdout; a failure fails the test with its output.
func runOK(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// listHas reports whether a Debian relationship field ("a, b (>= 1)")
// names pkg.
func listHas(field, pkg string) bool {
	for _, item := range strings.Split(field, ",") {
		if name, _, _ := strings.Cut(strings.TrimSpace(item), " "); name == pkg {
			return true
		}
	}
	return false
}
