package cdispec

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/nctk/nctk/internal/atomicfile"
	"golang.org/x/sys/unix"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdi "tags.cncf.io/container-device-interface/specs-go"
)

// FileMode is the mode of a written spec file (engines run as root, but
// `cdi list` and rootless tools read it as any user).
const FileMode = 0o644

// Check validates a spec value with the CDI library's own validators, the
// checks an engine makes after parsing a spec file: a known cdiVersion no
// lower than the content needs, vendor and class names, the spec-level
// edits (environment, device nodes, hooks, mounts), and at least one device,
// each with a valid, unique name and non-empty, valid edits. It parses
// nothing, so it is fast; Validate checks encoded data. A spec with
// annotations (whose validator the library does not export) is checked by
// encoding it and running Validate.
func Check(spec *cdi.Spec) error {
	if spec == nil {
		return errors.New("CDI spec does not validate: no spec")
	}
	if len(spec.Annotations) > 0 || slices.ContainsFunc(spec.Devices, func(d cdi.Device) bool { return len(d.Annotations) > 0 }) {
		data, err := Marshal(spec, FormatYAML)
		if err != nil {
			return err
		}
		return Validate(data)
	}
	fail := func(err error) error { return fmt.Errorf("CDI spec %s does not validate: %w", spec.Kind, err) }
	if err := cdi.ValidateVersion(spec); err != nil {
		return fail(err)
	}
	vendor, class := parser.ParseQualifier(spec.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fail(err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fail(err)
	}
	if err := (&pkgcdi.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).Validate(); err != nil {
		return fail(err)
	}
	if len(spec.Devices) == 0 {
		return fail(errors.New("no devices"))
	}
	seen := make(map[string]bool, len(spec.Devices))
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return fail(err)
		}
		if seen[d.Name] {
			return fail(fmt.Errorf("multiple devices %q", d.Name))
		}
		seen[d.Name] = true
		e := &d.ContainerEdits
		if len(e.Env)+len(e.DeviceNodes)+len(e.Hooks)+len(e.Mounts)+len(e.NetDevices)+len(e.AdditionalGIDs) == 0 && e.IntelRdt == nil {
			return fail(fmt.Errorf("device %q: empty device edits", d.Name))
		}
		if err := (&pkgcdi.ContainerEdits{ContainerEdits: e}).Validate(); err != nil {
			return fail(fmt.Errorf("device %q: %w", d.Name, err))
		}
	}
	return nil
}

// Encode checks spec (Check) and encodes it.
func Encode(spec *cdi.Spec, f Format) ([]byte, error) {
	if err := Check(spec); err != nil {
		return nil, err
	}
	return Marshal(spec, f)
}

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

// WriteFile writes encoded spec data (from Encode) to name atomically: into
// a temporary file in the same directory, synced, given mode 0644 and
// renamed over name (the directory is synced afterwards). Missing parent
// directories are created 0755 (on a fresh host /etc/cdi does not exist). A
// symbolic link at name is replaced; an existing directory or other
// non-regular file is an error. On any error name is left as it was.
func WriteFile(name string, data []byte) error {
	if err := atomicfile.WriteFile(name, data, atomicfile.Options{Mode: FileMode, Sync: true, DirMode: 0o755}); err != nil {
		return fmt.Errorf("write CDI spec %s: %w", name, err)
	}
	return nil
}
