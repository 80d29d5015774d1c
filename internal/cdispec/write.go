package cdispec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// FileMode is the mode of a written spec file (engines run as root, but
// `cdi list` and rootless tools read it as any user).
const FileMode = 0o644

// Validate checks encoded spec data with the CDI library exactly as an
// engine loads a spec file (strict parsing, version, kind, device names,
// edits): the library reads it from an anonymous in-memory file, so nothing
// is written to disk.
func Validate(data []byte) error {
	fd, err := unix.MemfdCreate("nctk-cdi-spec", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("validate CDI spec: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "nctk-cdi-spec")
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("validate CDI spec: %w", err)
	}
	if _, err := pkgcdi.ReadSpec(fmt.Sprintf("/proc/self/fd/%d", fd), 0); err != nil {
		return fmt.Errorf("CDI spec does not validate: %w", err)
	}
	return nil
}

// WriteFile writes encoded spec data to name atomically once Validate
// accepts it: into a temporary file in the same directory, synced, given
// mode 0644 and renamed over name (the directory is synced afterwards). On
// any error name is left as it was.
func WriteFile(name string, data []byte) (err error) {
	if err := Validate(data); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
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
