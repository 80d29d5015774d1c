package cdispec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// FileMode is the mode of a written spec file (engines run as root, but
// `cdi list` and rootless tools read it as any user).
const FileMode = 0o644

// Validate checks encoded spec data with the CDI library exactly as an
// engine loads a spec file (strict parsing, version, kind, device names,
// edits).
func Validate(data []byte) error {
	dir, err := os.MkdirTemp("", "nctk-cdi-")
	if err != nil {
		return fmt.Errorf("validate CDI spec: %w", err)
	}
	defer os.RemoveAll(dir)
	name := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		return fmt.Errorf("validate CDI spec: %w", err)
	}
	if _, err := pkgcdi.ReadSpec(name, 0); err != nil {
		return fmt.Errorf("CDI spec does not validate: %w", err)
	}
	return nil
}

// WriteFile writes encoded spec data to name atomically: into a temporary
// file in the same directory, which the CDI library must load as a valid
// spec, then synced, given mode 0644 and renamed over name (the directory
// is synced afterwards). On any error name is left as it was.
func WriteFile(name string, data []byte) (err error) {
	dir := filepath.Dir(name)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	if err = tmp.Chmod(FileMode); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	if _, err = pkgcdi.ReadSpec(tmp.Name(), 0); err != nil {
		return fmt.Errorf("write CDI spec %s: the generated spec does not validate: %w", name, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	if fi, serr := os.Stat(name); serr == nil && fi.IsDir() {
		return fmt.Errorf("write CDI spec %s: is a directory", name)
	}
	if err = os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	if d, derr := os.Open(dir); derr == nil {
		serr := d.Sync()
		d.Close()
		if serr != nil && !errors.Is(serr, os.ErrInvalid) {
			return fmt.Errorf("write CDI spec %s: sync directory: %w", name, serr)
		}
	}
	return nil
}
