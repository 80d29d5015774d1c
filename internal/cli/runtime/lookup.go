package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nctk/nctk/internal/cli/lookpath"
)

// findRuntime returns the first candidate that resolves to an executable
// file other than self: an entry containing "/" is a path; otherwise
// pathEnv (a $PATH value) and then the standard sbin/bin directories are
// searched. self ("" for none) is this program's executable, skipped so
// that a wrapper installed as "runc" does not exec itself.
func findRuntime(candidates []string, pathEnv, self string) (string, error) {
	if len(candidates) == 0 {
		return "", errors.New("no low-level runtime configured (nvidia-container-runtime.runtimes is empty)")
	}
	var selfID fileID
	if self != "" {
		selfID, _ = idOf(self)
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		var tries []string
		if strings.Contains(c, "/") {
			tries = []string{c}
		} else {
			for _, d := range append(filepath.SplitList(pathEnv), lookpath.StandardDirs()...) {
				if d == "" {
					continue
				}
				tries = append(tries, filepath.Join(d, c))
			}
		}
		for _, p := range tries {
			id, ok := executableID(p)
			if !ok || (selfID.ino != 0 && id == selfID) {
				continue
			}
			abs, err := filepath.Abs(p)
			if err != nil {
				continue
			}
			return abs, nil
		}
	}
	return "", fmt.Errorf("no low-level runtime found: none of %q is an executable in $PATH or %s",
		candidates, strings.Join(lookpath.StandardDirs(), ":"))
}

// findHelper returns the absolute path of a helper binary (nvidia-cdi-hook):
// next to the program (dir of argv0 or of self, the executable; "" for
// none), then in $PATH and the standard directories.
func findHelper(name, argv0, self, pathEnv string) (string, error) {
	var dirs []string
	if strings.Contains(argv0, "/") {
		dirs = append(dirs, filepath.Dir(argv0))
	}
	if self != "" {
		dirs = append(dirs, filepath.Dir(self))
	}
	dirs = append(dirs, filepath.SplitList(pathEnv)...)
	dirs = append(dirs, lookpath.StandardDirs()...)
	if p, ok := lookpath.Find(name, dirs); ok {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("%s not found next to %s, in $PATH or in %s", name, argv0, strings.Join(lookpath.StandardDirs(), ":"))
}

type fileID struct{ dev, ino uint64 }

func idOf(p string) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

// executableID stats p once: its identity, and whether it is a regular file
// with an execute bit.
func executableID(p string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino}, st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Mode&0o111 != 0
}
