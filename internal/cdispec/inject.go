package cdispec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/hostfile"

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
	// Stale are the loaded specs of the names' kinds that no longer match
	// the live system (CheckStale), the likely reason.
	Stale []*StaleError
}

func (e *UnresolvedError) Error() string {
	msg := fmt.Sprintf("unresolvable CDI device(s) %s: no spec in %s defines them",
		strings.Join(e.Devices, ", "), strings.Join(e.Dirs, ", "))
	if len(e.SpecErrors) > 0 {
		msg += " (broken specs: " + strings.Join(e.SpecErrors, "; ") + ")"
	}
	for _, s := range e.Stale {
		msg += "; " + s.Error()
	}
	return msg
}

// newCache loads the specs of dirs (later directories take precedence)
// once, without the CDI library's file watcher. The spec files are
// checked first (checkSpecFiles), as the library reads them unbounded.
func newCache(dirs []string) (*pkgcdi.Cache, error) {
	if err := checkSpecFiles(dirs); err != nil {
		return nil, fmt.Errorf("load CDI specs from %s: %w", strings.Join(dirs, ", "), err)
	}
	c, err := pkgcdi.NewCache(pkgcdi.WithSpecDirs(dirs...), pkgcdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("load CDI specs from %s: %w", strings.Join(dirs, ", "), err)
	}
	return c, nil
}

// checkSpecFiles checks the files the CDI library will read in dirs (the
// names ending in .json or .yaml) with hostfile.Check: a FIFO (on which
// the library's read would block), a socket or device, or a file over
// hostfile.MaxCDISpec is an error naming it. Directories and dangling
// links are left to the library, which reports them per file.
func checkSpecFiles(dirs []string) error {
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // the library reports unreadable directories
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			if ext := filepath.Ext(e.Name()); ext != ".json" && ext != ".yaml" {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if st, err := os.Stat(p); err != nil || st.IsDir() {
				continue
			}
			if err := hostfile.Check(p, hostfile.MaxCDISpec); err != nil {
				return err
			}
		}
	}
	return nil
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

// checkNames checks that names are fully-qualified CDI device names.
func checkNames(names []string) error {
	for _, n := range names {
		if _, _, _, err := parser.ParseQualifiedName(n); err != nil {
			return fmt.Errorf("inject CDI devices: %q: %w", n, err)
		}
	}
	return nil
}

// staleFor compares the specs of the kinds of the unresolved names in dirs
// with the live system (only on failure: why a spec no longer defines a
// name); nil when none is stale or the specs cannot be loaded.
func staleFor(missing, dirs []string) []*StaleError {
	var kinds []string
	for _, n := range missing {
		if v, cl, _, err := parser.ParseQualifiedName(n); err == nil {
			kinds = append(kinds, v+"/"+cl)
		}
	}
	c, err := newCache(dirs)
	if err != nil {
		return nil
	}
	return staleIn(c, kinds, StaleOptions{}).Stale
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
