package cdihook

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/cudacompat/compattest"
	"github.com/nctk/nctk/internal/e2e"
	"golang.org/x/sys/unix"
)

// hostSnapshot describes every object below dir (type and mode, owner,
// content or link target) to compare a sentinel host directory before and
// after a hook ran.
func hostSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("%o %d:%d", st.Mode, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %q", data)
		}
		out[p] = desc
		return nil
	}))
	return out
}

// sentinelHost is a host directory laid out like the parts of a host an
// image would aim at: etc (with ld.so.cache, ld.so.conf.d and passwd), a
// library directory with a libcuda, and dev.
func sentinelHost(t *testing.T) string {
	t.Helper()
	host := t.TempDir()
	for p, c := range map[string]string{
		"etc/passwd": "root:x:0:0::/root:/bin/sh\n", "etc/ld.so.cache": "host cache", "etc/ld.so.conf.d/host.conf": "/host/lib\n",
		"lib/libcuda.so.999.1.1": "host libcuda", "lib/libnvidia-ml.so.1": "host nvml", "dev/nvidia0": "not a node",
	} {
		must(t, os.MkdirAll(filepath.Join(host, filepath.Dir(p)), 0o755))
		must(t, os.WriteFile(filepath.Join(host, p), []byte(c), 0o640))
	}
	return host
}

// execHook runs nvidia-cdi-hook as an engine does: its own process (this
// test binary as the hook), the OCI state on stdin, the hook's arguments
// as a spec gives them, an empty environment but PATH.
func execHook(t *testing.T, state string, args ...string) result {
	t.Helper()
	bin, err := os.Executable()
	must(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Args[0] = "nvidia-cdi-hook"
	cmd.Env = []string{"NCTK_CDIHOOK_TEST_MAIN=1", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin = strings.NewReader(state)
	cmd.Dir = "/"
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

// TestHostileHooks is the hostile-input suite of issue 13 for every
// nvidia-cdi-hook as any engine runs it: images whose directories and
// files are symlinks to a host directory (absolute, or climbing with
// ".."), link paths and targets that climb out of the root, an image
// compat libcuda that is a symlink to the host, a FIFO or a huge file,
// forged /dev entries. Whatever each hook does (succeed inside the root,
// or fail naming the path), the sentinel host directory is unchanged.
func TestHostileHooks(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu"
	const compat = "/usr/local/cuda/compat"
	tests := []struct {
		name  string
		image func(t *testing.T, root, host string)
		args  []string
		// wantErr, when set, is a text the hook's error must hold;
		// otherwise the hook must succeed.
		wantErr string
		// made is a host path inside the root ({{host}} replaced) the hook
		// must have created.
		made string
	}{
		{name: "link path through an image lib dir linked to the host",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/usr/lib", 0o755))
				must(t, os.Symlink(host+"/lib", root+lib))
			},
			args:    []string{"create-symlinks", "--link", "libcuda.so.999.1.1::" + lib + "/libcuda.so.1", "--link", "libcuda.so.1::" + lib + "/libcuda.so"},
			wantErr: lib + " (in container root"},
		{name: "link path through an image lib dir linked to the host path, present inside the root",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/usr/lib", 0o755))
				must(t, os.MkdirAll(root+host+"/lib", 0o755))
				must(t, os.Symlink(host+"/lib", root+lib))
			},
			args: []string{"create-symlinks", "--link", "libcuda.so.999.1.1::" + lib + "/libcuda.so.1", "--link", "x::" + lib + "/libnvidia-ml.so.1"},
			made: "{{host}}/lib/libcuda.so.1"},
		{name: "update-ldcache with /etc linked to the host path, present inside the root",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+host+"/etc", 0o755))
				must(t, os.Symlink(host+"/etc", root+"/etc"))
				must(t, os.MkdirAll(root+lib, 0o755))
			},
			args: []string{"update-ldcache", "--folder", lib, "--lib", lib + "/libcuda.so.1"},
			made: "{{host}}/etc/ld.so.conf.d/00-nctk.conf"},
		{name: "link path through a relative climbing symlink",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/usr/lib", 0o755))
				must(t, os.Symlink("../../../../../../../../.."+host+"/lib", root+lib))
			},
			args:    []string{"create-symlinks", "--link", "x::" + lib + "/libnvidia-ml.so.1"},
			wantErr: "is a symlink in the container image"},
		{name: "link path climbing with ..",
			args: []string{"create-symlinks", "--link", "x::/../../../../..{{host}}/etc/passwd", "--link", "y::/usr/../../..{{host}}/lib/new"},
			made: "{{host}}/lib/new"},
		{name: "link path whose last component links to a host file",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+lib, 0o755))
				must(t, os.Symlink(host+"/lib/libnvidia-ml.so.1", root+lib+"/libnvidia-ml.so.1"))
			},
			args: []string{"create-symlinks", "--link", "libnvidia-ml.so.570::" + lib + "/libnvidia-ml.so.1"}},
		{name: "link target naming a host file",
			args: []string{"create-symlinks", "--link", "{{host}}/etc/passwd::/etc/passwd-link", "--link", "../../../../..{{host}}/etc::/etc/climb"}},
		{name: "update-ldcache with /etc linked to the host",
			image: func(t *testing.T, root, host string) {
				must(t, os.Symlink(host+"/etc", root+"/etc"))
				must(t, os.MkdirAll(root+lib, 0o755))
			},
			args:    []string{"update-ldcache", "--folder", lib, "--lib", lib + "/libcuda.so.1"},
			wantErr: "/etc"},
		{name: "update-ldcache with ld.so.conf.d and ld.so.cache linked to the host",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/etc", 0o755))
				must(t, os.Symlink(host+"/etc/ld.so.conf.d", root+"/etc/ld.so.conf.d"))
				must(t, os.Symlink(host+"/etc/ld.so.cache", root+"/etc/ld.so.cache"))
				must(t, os.MkdirAll(root+lib, 0o755))
			},
			args:    []string{"update-ldcache", "--folder", lib, "--lib", lib + "/libcuda.so.1"},
			wantErr: "/etc/ld.so.conf.d"},
		{name: "update-ldcache with a --lib through a host link",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/etc", 0o755))
				must(t, os.MkdirAll(root+"/usr/lib", 0o755))
				must(t, os.Symlink(host+"/lib", root+lib))
			},
			// The in-process update fails (the link dangles inside the
			// root); the confined ldconfig it falls back to runs inside.
			args: []string{"update-ldcache", "--folder", lib, "--lib", lib + "/libcuda.so.999.1.1"}},
		{name: "compat libcuda a symlink to the host's",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+compat, 0o755))
				must(t, os.Symlink(host+"/lib/libcuda.so.999.1.1", root+compat+"/libcuda.so.999.1.1"))
			},
			args: []string{"enable-cuda-compat", "--host-driver-version=580.65.06"}},
		{name: "compat libcuda a FIFO",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+compat, 0o755))
				must(t, unix.Mkfifo(root+compat+"/libcuda.so.999.1.1", 0o644))
			},
			args:    []string{"enable-cuda-compat", "--host-driver-version=580.65.06"},
			wantErr: "not a regular file"},
		{name: "compat libcuda a huge sparse file",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+compat, 0o755))
				f, err := os.Create(root + compat + "/libcuda.so.999.1.1")
				must(t, err)
				must(t, f.Truncate(4<<30))
				f.Close()
			},
			args:    []string{"enable-cuda-compat", "--host-driver-version=580.65.06"},
			wantErr: "too large"},
		{name: "compat drop-in through ld.so.conf.d linked to the host",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+compat, 0o755))
				must(t, os.WriteFile(root+compat+"/libcuda.so.999.1.1", compattest.NoteELF("", "", "", 4), 0o644))
				must(t, os.MkdirAll(root+"/etc", 0o755))
				must(t, os.Symlink(host+"/etc/ld.so.conf.d", root+"/etc/ld.so.conf.d"))
			},
			args:    []string{"enable-cuda-compat", "--host-driver-version=580.65.06"},
			wantErr: "/etc/ld.so.conf.d"},
		{name: "application profile through /etc/nvidia linked to the host, forged /dev entries",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/etc", 0o755))
				must(t, os.Symlink(host+"/etc", root+"/etc/nvidia"))
				must(t, os.MkdirAll(root+"/dev", 0o755))
				must(t, os.Symlink(host+"/dev/nvidia0", root+"/dev/nvidia0"))
				must(t, os.WriteFile(root+"/dev/nvidia1", []byte("a regular file"), 0o644))
				must(t, unix.Mknod(root+"/dev/nvidia2", unix.S_IFCHR|0o666, int(unix.Mkdev(195, 2))))
			},
			wantErr: "/etc/nvidia (in container root"},
		{name: "chmod through links to the host",
			image: func(t *testing.T, root, host string) {
				must(t, os.MkdirAll(root+"/dev", 0o755))
				must(t, os.Symlink(host+"/dev", root+"/dev/dri"))
				must(t, os.Symlink("../../../../../.."+host+"/etc/passwd", root+"/dev/climb"))
			},
			args: []string{"chmod", "--mode", "777", "--path", "/dev/dri", "--path", "/dev/climb", "--path", "/../../..{{host}}/etc/passwd"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := sentinelHost(t)
			b, root := bundle(t)
			if tc.image != nil {
				tc.image(t, root, host)
			}
			args := tc.args
			if args == nil {
				args = []string{"update-application-profile"}
			}
			for i := range args {
				args = append(args[:i:i], append([]string{strings.ReplaceAll(args[i], "{{host}}", host)}, args[i+1:]...)...)
			}
			before := hostSnapshot(t, host)
			r := execHook(t, stateFor(b), args...)
			if d := e2e.TreeDiff(hostSnapshot(t, host), before); len(d) > 0 {
				t.Errorf("the host changed: %v (hook exit %d: %s)", d, r.code, r.stderr)
			}
			switch {
			case tc.wantErr == "" && r.code != 0:
				t.Errorf("exit %d: %s", r.code, r.stderr)
			case tc.wantErr != "" && (r.code == 0 || !strings.Contains(r.stderr, tc.wantErr)):
				t.Errorf("exit %d, %q; want an error naming %q", r.code, r.stderr, tc.wantErr)
			}
			if tc.made != "" {
				if _, err := os.Lstat(filepath.Join(root, strings.ReplaceAll(tc.made, "{{host}}", host))); err != nil {
					t.Errorf("not made inside the root: %v", err)
				}
			}
		})
	}
}
