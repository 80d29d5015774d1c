package cdispec

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	pkgcdi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// DefaultSpecDirs are the CDI spec directories engines read, lowest
// priority first.
func DefaultSpecDirs() []string { return []string{"/etc/cdi", "/var/run/cdi"} }

// UnresolvedError reports CDI device names no spec in the searched
// directories defines.
type UnresolvedError struct {
	// Devices are the names that did not resolve.
	Devices []string
	// Dirs are the spec directories searched.
	Dirs []string
	// SpecErrors describe spec files that could not be loaded (one line
	// per problem, prefixed with the file), which may be why.
	SpecErrors []string
}

func (e *UnresolvedError) Error() string {
	msg := fmt.Sprintf("unresolvable CDI device(s) %s: no spec in %s defines them",
		strings.Join(e.Devices, ", "), strings.Join(e.Dirs, ", "))
	if len(e.SpecErrors) > 0 {
		msg += " (broken specs: " + strings.Join(e.SpecErrors, "; ") + ")"
	}
	return msg
}

// newCache loads the specs of dirs (later directories take precedence)
// once, without the CDI library's file watcher.
func newCache(dirs []string) (*pkgcdi.Cache, error) {
	c, err := pkgcdi.NewCache(pkgcdi.WithSpecDirs(dirs...), pkgcdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("load CDI specs from %s: %w", strings.Join(dirs, ", "), err)
	}
	return c, nil
}

// specErrors flattens the cache's per-file errors, sorted by file.
func specErrors(c *pkgcdi.Cache) []string {
	var out []string
	for file, errs := range c.GetErrors() {
		for _, err := range errs {
			msg := err.Error()
			if !strings.Contains(msg, file) {
				msg = file + ": " + msg
			}
			out = append(out, msg)
		}
	}
	slices.Sort(out)
	return out
}

// InjectCDI applies the CDI devices names (fully qualified,
// vendor/class=name) to spec, resolving them against the spec files in
// specDirs (nil means DefaultSpecDirs; later directories take precedence):
// each spec's containerEdits once, then each device's. A name that is not
// fully qualified or that no spec defines is an error naming it and the
// directories searched, and then spec is left unchanged.
func InjectCDI(spec *specs.Spec, names []string, specDirs []string) error {
	if spec == nil {
		return errors.New("inject CDI devices: no OCI spec")
	}
	if len(names) == 0 {
		return nil
	}
	// Edit a copy so that a failure leaves spec as it was.
	work, err := cloneSpec(spec)
	if err != nil {
		return fmt.Errorf("inject CDI devices: %w", err)
	}
	if err := applyDevices(work, names, specDirs); err != nil {
		return err
	}
	*spec = *work
	return nil
}

// applyDevices applies the CDI devices names to spec, which may be left half
// edited on error.
func applyDevices(spec *specs.Spec, names, specDirs []string) error {
	if len(specDirs) == 0 {
		specDirs = DefaultSpecDirs()
	}
	for _, n := range names {
		if _, _, _, err := parser.ParseQualifiedName(n); err != nil {
			return fmt.Errorf("inject CDI devices: %q: %w", n, err)
		}
	}
	c, err := newCache(specDirs)
	if err != nil {
		return fmt.Errorf("inject CDI devices: %w", err)
	}
	// The library resolves every name before it edits anything.
	if unresolved, err := c.InjectDevices(spec, names...); err != nil {
		if len(unresolved) > 0 {
			var missing []string
			for _, n := range unresolved {
				if !slices.Contains(missing, n) {
					missing = append(missing, n)
				}
			}
			return &UnresolvedError{Devices: missing, Dirs: specDirs, SpecErrors: specErrors(c)}
		}
		return fmt.Errorf("inject CDI devices %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// Edits returns the OCI edits the CDI devices names make, as InjectCDI
// applies them to an empty spec (a process with no environment, no mounts,
// devices or hooks): process.env, linux.devices, linux.resources.devices
// (allow rules), mounts and hooks hold exactly what the devices add, in the
// CDI library's translation (device numbers stat'ed from host nodes where a
// spec leaves them out). It is for callers that edit a spec document
// without decoding it into specs.Spec (so as to keep fields runtime-spec
// does not know); they merge these entries. The library's idmap options for
// containers with a user namespace are not applied here.
func Edits(names, specDirs []string) (*specs.Spec, error) {
	s := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	if len(names) == 0 {
		return s, nil
	}
	// s is new: no copy to keep it whole on error.
	if err := applyDevices(s, names, specDirs); err != nil {
		return nil, err
	}
	return s, nil
}

// Listing is what `cdi list` shows: the fully-qualified device names of the
// loaded specs, sorted, and the problems met loading them.
type Listing struct {
	Devices []string
	// Errors are per-file load errors and unreadable directories, one line
	// each.
	Errors []string
}

// List loads the specs in specDirs (nil means DefaultSpecDirs). Broken
// spec files are reported in Listing.Errors, not as an error; a missing
// directory is not a problem.
func List(specDirs []string) (Listing, error) {
	if len(specDirs) == 0 {
		specDirs = DefaultSpecDirs()
	}
	c, err := newCache(specDirs)
	if err != nil {
		return Listing{}, err
	}
	l := Listing{Devices: c.ListDevices(), Errors: specErrors(c)}
	slices.Sort(l.Devices)
	return l, nil
}

// cloneSpec deep-copies an OCI spec.
func cloneSpec(s *specs.Spec) (*specs.Spec, error) {
	data, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("copy OCI spec: %w", err)
	}
	var c specs.Spec
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("copy OCI spec: %w", err)
	}
	return &c, nil
}
