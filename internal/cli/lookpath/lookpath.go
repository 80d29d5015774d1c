// Package lookpath finds the programs nctk's tools run or name in specs
// (low-level runtimes, nvidia-container-cli, nvidia-cdi-hook, docker): one
// executable check and one directory search instead of one per tool.
package lookpath

import (
	"os"
	"path/filepath"
)

// StandardDirs are the sbin and bin directories searched after (or, with no
// $PATH, instead of) $PATH.
func StandardDirs() []string {
	return []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
}

// IsExecutable reports whether p is a regular file with an execute bit.
func IsExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Find returns dir/name for the first of dirs that holds an executable
// name (empty entries are skipped), and whether there was one.
func Find(name string, dirs []string) (string, bool) {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if p := filepath.Join(d, name); IsExecutable(p) {
			return p, true
		}
	}
	return "", false
}
