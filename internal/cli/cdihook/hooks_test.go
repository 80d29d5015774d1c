package cdihook

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/appprofile"
	"golang.org/x/sys/unix"
)

// TestUpdateApplicationProfile: the profile lists the minors of the
// container's /dev/nvidiaN character devices, byte for byte as NVIDIA's
// hook writes it; other nodes, files and links of that name do not count.
func TestUpdateApplicationProfile(t *testing.T) {
	type node struct {
		name  string
		mode  uint32 // S_IFCHR, S_IFREG or S_IFLNK
		minor uint32
	}
	chr := func(name string, minor uint32) node { return node{name, unix.S_IFCHR, minor} }
	tests := []struct {
		name  string
		nodes []node
		want  string // "" for no file
	}{
		{"two GPUs", []node{chr("nvidia0", 0), chr("nvidia3", 3), chr("nvidiactl", 255), chr("nvidia-uvm", 0)},
			`{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x9]}],"rules":[{"pattern":[],"profile":"_container_"}]}`},
		{"the minor counts, not the name", []node{chr("nvidia1", 7)},
			`{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x80]}],"rules":[{"pattern":[],"profile":"_container_"}]}`},
		{"minor 63 and beyond", []node{chr("nvidia63", 63), chr("nvidia64", 64)},
			`{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x8000000000000000]}],"rules":[{"pattern":[],"profile":"_container_"}]}`},
		{"no GPU nodes", []node{chr("nvidiactl", 255), {"nvidia0", unix.S_IFREG, 0}, {"nvidia1", unix.S_IFLNK, 0}}, ""},
		{"only out of range", []node{chr("nvidia70", 70)}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			must(t, os.MkdirAll(root+"/dev", 0o755))
			for _, n := range tc.nodes {
				p := root + "/dev/" + n.name
				switch n.mode {
				case unix.S_IFCHR:
					must(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, n.minor))))
				case unix.S_IFREG:
					must(t, os.WriteFile(p, nil, 0o644))
				case unix.S_IFLNK:
					must(t, os.Symlink("/dev/nvidia0", p))
				}
			}
			if r := run(stateFor(b), nil, "update-application-profile"); r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			data, err := os.ReadFile(root + appprofile.File)
			if tc.want == "" {
				if err == nil {
					t.Errorf("profile written: %s", data)
				}
				return
			}
			if string(data) != tc.want {
				t.Errorf("profile = %s, %v\nwant      %s", data, err, tc.want)
			}
			if st, _ := os.Stat(root + appprofile.File); st.Mode().Perm() != 0o444 {
				t.Errorf("profile mode %v, want 0444", st.Mode())
			}
			if st, _ := os.Stat(root + appprofile.Dir); st.Mode().Perm() != 0o555 {
				t.Errorf("profile directory mode %v, want 0555", st.Mode())
			}
		})
	}
	t.Run("no /dev", func(t *testing.T) {
		b, root := bundle(t)
		if r := run(stateFor(b), nil, "update-application-profile"); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if _, err := os.Lstat(root + "/etc"); err == nil {
			t.Error("/etc created")
		}
	})
	t.Run("/etc/nvidia links to a host directory", func(t *testing.T) {
		host := t.TempDir()
		b, root := bundle(t)
		must(t, os.MkdirAll(root+"/dev", 0o755))
		must(t, unix.Mknod(root+"/dev/nvidia2", unix.S_IFCHR|0o666, int(unix.Mkdev(195, 2))))
		must(t, os.MkdirAll(root+"/etc", 0o755))
		must(t, os.Symlink(host, root+"/etc/nvidia"))
		must(t, os.MkdirAll(filepath.Join(root, host), 0o755))
		if r := run(stateFor(b), nil, "update-application-profile"); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if ents, _ := os.ReadDir(host); len(ents) != 0 {
			t.Errorf("written on the host: %v", ents)
		}
		if _, err := os.Stat(filepath.Join(root, host, "nvidia-application-profiles-rc.d/10-container.conf")); err != nil {
			t.Errorf("not written inside the root: %v", err)
		}
	})
}

// TestChmod: modes are set inside the root through symlinks that stay in
// it; missing paths are skipped; a link to a host path never changes the
// host's object; only permission bits are applied.
func TestChmod(t *testing.T) {
	host := t.TempDir()
	must(t, os.Chmod(host, 0o700))
	b, root := bundle(t)
	must(t, os.MkdirAll(root+"/dev/dri", 0o700))
	must(t, os.MkdirAll(root+"/dev/nvidia-caps", 0o711))
	must(t, unix.Mknod(root+"/dev/nvidia-caps/nvidia-cap1", unix.S_IFCHR|0o400, int(unix.Mkdev(511, 1))))
	must(t, os.Symlink(host, root+"/dev/escape"))
	must(t, os.MkdirAll(filepath.Join(root, host), 0o700))
	must(t, os.Symlink("../../../../../../"+host, root+"/dev/climb"))
	r := run(stateFor(b), nil, "chmod", "--mode", "4755", "--path", "/dev/dri", "--path", "dev/nvidia-caps",
		"--path", "/dev/nvidia-caps/nvidia-cap1", "--path", "/dev/missing", "--path", "/dev/escape", "--path", "/dev/climb/x")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, p := range []string{"/dev/dri", "/dev/nvidia-caps", "/dev/nvidia-caps/nvidia-cap1", host} {
		st, err := os.Lstat(filepath.Join(root, p))
		if err != nil || st.Mode()&(os.ModePerm|os.ModeSetuid) != 0o755 {
			t.Errorf("%s in the root: mode %v, %v; want 0755", p, st.Mode(), err)
		}
	}
	if st, _ := os.Stat(host); st.Mode().Perm() != 0o700 {
		t.Errorf("the host directory's mode changed: %v", st.Mode())
	}
	if r := run(stateFor(b), nil, "chmod", "--mode", "755", "--path", "/dev/dri"); r.code != 0 {
		t.Errorf("unchanged mode: exit %d: %s", r.code, r.stderr)
	}
	// A failing hook restores the modes it changed.
	must(t, os.Symlink("loop", root+"/dev/loop"))
	r = run(stateFor(b), nil, "chmod", "--mode", "700", "--path", "/dev/dri", "--path", "/dev/loop")
	if r.code != 1 || !strings.Contains(r.stderr, "/dev/loop") {
		t.Errorf("symlink loop: exit %d: %s", r.code, r.stderr)
	}
	if st, _ := os.Stat(root + "/dev/dri"); st.Mode().Perm() != 0o755 {
		t.Errorf("/dev/dri mode %v after the failed hook, want 0755 restored", st.Mode())
	}
}

// TestGlobalFlags: NVIDIA's global flags: -v/--version, --debug/-d, and
// --quiet, which overrides --debug.
func TestGlobalFlags(t *testing.T) {
	for _, f := range []string{"-v", "--version", "-version"} {
		if r := run("", nil, f); r.code != 0 || !strings.Contains(r.stdout, "version") {
			t.Errorf("%s: exit %d, %q", f, r.code, r.stdout)
		}
	}
	b, _ := bundle(t)
	link := []string{"create-symlinks", "--link", "a::/x"}
	tests := []struct {
		flags []string
		env   []string
		debug bool
	}{
		{[]string{"--debug"}, nil, true},
		{[]string{"-d"}, nil, true},
		{nil, []string{"NVIDIA_CTK_DEBUG=true"}, true},
		{nil, []string{"NVIDIA_CDI_DEBUG=1"}, true},
		{nil, nil, false},
		{[]string{"--debug", "--quiet"}, nil, false},
		{[]string{"--quiet", "-d"}, nil, false},
		{[]string{"--debug"}, []string{"NVIDIA_CTK_QUIET=true"}, false},
		// After the hook name, as NVIDIA's hook accepts them too.
		{[]string{"", "--debug"}, nil, true},
		{[]string{"", "-d"}, nil, true},
		{[]string{"--quiet", "", "--debug"}, nil, false},
		{[]string{"--debug", "", "--quiet"}, nil, false},
	}
	for _, tc := range tests {
		// "" in flags stands for the hook and its own arguments.
		args := slices.Clone(tc.flags)
		if i := slices.Index(args, ""); i >= 0 {
			args = slices.Concat(args[:i], link, args[i+1:])
		} else {
			args = append(args, link...)
		}
		r := run(stateFor(b), tc.env, args...)
		if r.code != 0 {
			t.Fatalf("%q %q: exit %d: %s", tc.env, tc.flags, r.code, r.stderr)
		}
		if got := strings.Contains(r.stderr, "level=DEBUG"); got != tc.debug {
			t.Errorf("%q %q: debug output %v, want %v: %q", tc.env, tc.flags, got, tc.debug, r.stderr)
		}
	}
}
