package packaging

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/e2e"
	"github.com/nctk/nctk/internal/version"
)

// TestRPM builds the rpm as `make rpm` does (twice, the second a newer
// release), checks its metadata and that its payload is what
// packaging/stage.sh installs (the .deb's files), then installs it with
// rpm into a temporary root (its own rpm database; scriptlets run chrooted
// there with busybox as their shell) over a stand-in for NVIDIA's package,
// which it must obsolete, upgrades it over an edited config.toml and
// erases it.
func TestRPM(t *testing.T) {
	rpmbuild, err := exec.LookPath("rpmbuild")
	if err != nil {
		t.Skipf("rpmbuild is not installed (%v; apt-get install rpm): the rpm cannot be built", err)
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
	rpm1 := buildRPM(t, repo, bin, out, "")
	rpm2 := buildRPM(t, repo, bin, out, "2")
	if want := "nctk-" + version.Version + "-1."; !strings.HasPrefix(filepath.Base(rpm1), want) {
		t.Errorf("package file %s, want %s<arch>.rpm", filepath.Base(rpm1), want)
	}

	t.Run("metadata", func(t *testing.T) {
		q := func(args ...string) []string {
			return strings.Split(strings.TrimSpace(runOK(t, "", nil, "rpm", append([]string{"-qp"}, append(args, rpm1)...)...)), "\n")
		}
		if got, want := q("--qf", "%{NAME} %{VERSION} %{RELEASE}")[0], "nctk "+version.Version+" 1"; got != want {
			t.Errorf("name version release %q, want %q", got, want)
		}
		provides, conflicts, obsoletes := q("--provides"), q("--conflicts"), q("--obsoletes")
		for _, p := range nvidiaPackages {
			if want := p + " = " + version.NVIDIACompat; !slices.Contains(provides, want) {
				t.Errorf("Provides %q lacks %s", provides, want)
			}
			if !slices.Contains(conflicts, p) {
				t.Errorf("Conflicts %q lacks %s", conflicts, p)
			}
			if !slices.Contains(obsoletes, p) {
				t.Errorf("Obsoletes %q lacks %s", obsoletes, p)
			}
		}
		// %config(noreplace): flags c(onfig) and n(oreplace).
		if got := q("--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]"); !slices.ContainsFunc(got, func(l string) bool {
			name, flags, _ := strings.Cut(l, " ")
			return name == configFile && strings.Contains(flags, "c") && strings.Contains(flags, "n")
		}) {
			t.Errorf("%s is not %%config(noreplace):\n%s", configFile, strings.Join(got, "\n"))
		}
		// The payload: every file, link and directory stage.sh installs,
		// with its mode and link target, and nothing else.
		stage := t.TempDir()
		runOK(t, repo, nil, "packaging/stage.sh", bin, stage)
		want := stagedFiles(t, stage)
		got := q("--qf", "[%{FILENAMES} %{FILEMODES:perms} %{FILELINKTOS}\n]")
		for i := range got {
			got[i] = strings.TrimSpace(got[i])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("payload:\n%s\nwant (stage.sh):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})

	if os.Geteuid() != 0 {
		t.Skip("installing into a root needs root (rpm chroots there for the scriptlets)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skipf("busybox is not installed (%v): the scriptlets would have no shell in the root", err)
	}
	root := filepath.Join(t.TempDir(), "root")
	rpm := newRPMRoot(t, root, busybox)

	// A stand-in for NVIDIA's package, which nctk obsoletes.
	fake := buildFakeRPM(t, rpmbuild, "nvidia-container-toolkit", "1.17.0")
	rpm("-i", "--nodeps", fake)
	rpm("-U", "--nodeps", rpm1)
	if got := rpmQuery(t, root, "nctk"); got != "nctk-"+version.Version+"-1" {
		t.Fatalf("after install: rpm -q nctk = %q", got)
	}
	if got := rpmQuery(t, root, "nvidia-container-toolkit"); !strings.Contains(got, "not installed") {
		t.Errorf("installing nctk did not obsolete nvidia-container-toolkit: rpm -q says %q", got)
	}
	if got := rpmQuery(t, root, "--whatprovides", "nvidia-container-toolkit"); got != "nctk-"+version.Version+"-1" {
		t.Errorf("rpm -q --whatprovides nvidia-container-toolkit = %q, want nctk", got)
	}
	checkInstalledFiles(t, root)
	ctk := filepath.Join(root, "/usr/bin/nvidia-ctk")
	cfg, err := os.ReadFile(filepath.Join(root, configFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := runOK(t, "", nil, ctk, "config", "default"); string(cfg) != want {
		t.Errorf("installed config.toml is not `nvidia-ctk config default`:\n%s\nwant:\n%s", cfg, want)
	}

	// Upgrade over an edited config.toml: rpm keeps the admin's file (the
	// packaged one did not change).
	edited := append(bytes.Clone(cfg), "\n# edited by the admin\n"...)
	if err := os.WriteFile(filepath.Join(root, configFile), edited, 0o644); err != nil {
		t.Fatal(err)
	}
	rpm("-U", "--nodeps", rpm2)
	if got := rpmQuery(t, root, "nctk"); got != "nctk-"+version.Version+"-2" {
		t.Fatalf("after upgrade: rpm -q nctk = %q", got)
	}
	if got, err := os.ReadFile(filepath.Join(root, configFile)); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("upgrade did not keep the edited config.toml (%v):\n%s", err, got)
	}

	// Erase: the files and the refresh service's spec go; rpm saves the
	// edited config as .rpmsave.
	spec := filepath.Join(root, "/var/run/cdi/nvidia.yaml")
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte("cdiVersion: 0.5.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rpm("-e", "nctk")
	if got := rpmQuery(t, root, "nctk"); !strings.Contains(got, "not installed") {
		t.Errorf("after erase: rpm -q nctk = %q", got)
	}
	for _, p := range []string{"/usr/bin/nctk", "/usr/bin/nvidia-ctk", udevRule, unitDir + "/" + units[0], "/var/run/cdi/nvidia.yaml", configFile} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after erase (%v)", p, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(root, configFile+".rpmsave")); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("erase did not save the edited config.toml as .rpmsave (%v)", err)
	}
}

// buildRPM runs packaging/build-rpm.sh (with RPM_RELEASE when release is
// not "") and returns the package it wrote.
func buildRPM(t *testing.T, repo, bin, out, release string) string {
	t.Helper()
	var env []string
	if release != "" {
		env = append(env, "RPM_RELEASE="+release)
	}
	p := strings.TrimSpace(runOK(t, repo, env, "packaging/build-rpm.sh", bin, out))
	if filepath.Dir(p) != out || !strings.HasSuffix(p, ".rpm") {
		t.Fatalf("build-rpm.sh printed %q, want an .rpm in %s", p, out)
	}
	return p
}

// stagedFiles lists what stage.sh installed under stage as rpm -q prints
// it ("PATH PERMS LINKTARGET", LINKTARGET empty for a file or directory),
// sorted, without the directories the rpm does not own (/usr, /etc, ...).
func stagedFiles(t *testing.T, stage string) []string {
	t.Helper()
	owned := []string{"/etc/nvidia-container-runtime", "/usr/share/doc/nctk"}
	var out []string
	err := filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, stage)
		if rel == "" || (d.IsDir() && !slices.Contains(owned, rel)) {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		target := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", rel, rpmPerms(fi.Mode()), target)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// rpmPerms is a mode as rpm's :perms format prints it (ls -l style).
func rpmPerms(m fs.FileMode) string {
	s := []byte(m.Perm().String())
	switch {
	case m.IsDir():
		s[0] = 'd'
	case m&fs.ModeSymlink != 0:
		s[0] = 'l'
	}
	return string(s)
}

// newRPMRoot makes root with an empty rpm database and busybox as /bin/sh
// (and its other applets) for the scriptlets, and returns a function that
// runs rpm on it.
func newRPMRoot(t *testing.T, root, busybox string) func(args ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	runOK(t, "", nil, "cp", busybox, filepath.Join(root, "bin/busybox"))
	runOK(t, "", nil, "chroot", root, "/bin/busybox", "--install", "-s", "/bin")
	runOK(t, "", nil, "rpm", "--root", root, "--initdb")
	return func(args ...string) {
		t.Helper()
		runOK(t, "", nil, "rpm", append([]string{"--root", root}, args...)...)
	}
}

// rpmQuery is `rpm -q args...` in root: the package's NVR, or rpm's "not
// installed" message (rpm then exits 1, which is not a failure here).
func rpmQuery(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, _ := exec.Command("rpm", append([]string{"--root", root, "-q", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// buildFakeRPM builds a noarch rpm named name at version holding one
// documentation file, and returns its path.
func buildFakeRPM(t *testing.T, rpmbuild, name, ver string) string {
	t.Helper()
	dir := t.TempDir()
	spec := filepath.Join(dir, name+".spec")
	content := fmt.Sprintf(`Name: %[1]s
Version: %[2]s
Release: 1
Summary: stand-in for the test
License: none
BuildArch: noarch
%%description
A stand-in for %[1]s.
%%install
mkdir -p %%{buildroot}/usr/share/doc/%[1]s
echo stand-in > %%{buildroot}/usr/share/doc/%[1]s/README
%%files
/usr/share/doc/%[1]s/README
`, name, ver)
	if err := os.WriteFile(spec, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	runOK(t, "", nil, rpmbuild, "-bb", "--quiet", "--define", "_topdir "+dir, "--define", "__os_install_post %{nil}", spec)
	p := filepath.Join(dir, "RPMS/noarch", name+"-"+ver+"-1.noarch.rpm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("rpmbuild wrote no %s: %v", p, err)
	}
	return p
}
