package ctk

import (
	"fmt"
	"strings"

	"github.com/nctk/nctk/internal/cdispec"
)

// cdiValidate is `nvidia-ctk cdi validate`: every spec in the spec
// directories is compared with the live system (cdispec.StaleSpecs, the
// check the doctor's cdi.stale and the runtime's CDI mode use too). Each
// stale or broken spec is named on stdout with what differs and the command
// that fixes it; any makes the exit status 1.
func cdiValidate(e *env, args []string) error {
	var dirs []string
	var driverRoot, devRoot string
	fs := newFlagSet("validate")
	fs.Func([]string{"spec-dir"}, "DIR", "a CDI spec directory (repeatable; default /etc/cdi and /var/run/cdi) [$NVIDIA_CTK_CDI_SPEC_DIRS]",
		listFlag(&dirs))
	fs.String(&driverRoot, []string{"driver-root"}, []string{"NVIDIA_CTK_DRIVER_ROOT"}, "DIR",
		"the root the driver is installed under (default: the root each spec's paths show)")
	fs.String(&devRoot, []string{"dev-root"}, []string{"NVIDIA_CTK_DEV_ROOT"}, "DIR",
		"the root whose /dev holds the device nodes (default: the driver root)")
	if err := parseLeaf(e, fs, args, "[--spec-dir DIR]... [--driver-root DIR]",
		"Compare the CDI specs with the live system: the files, device nodes (and their major/minor numbers) and\n"+
			"hooks they name, the driver version of their libraries, and the GPUs they define (gone, moved or added).\n"+
			"Each stale spec is named with what differs and the command that rewrites it; the exit status is 1 then."); err != nil {
		return err
	}
	if len(dirs) == 0 {
		if v, ok := e.LookupEnv("NVIDIA_CTK_CDI_SPEC_DIRS"); ok && v != "" {
			dirs = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ':' })
		}
	}
	if driverRoot == "" && devRoot != "" {
		driverRoot = "/"
	}
	r, err := cdispec.StaleSpecs(dirs, cdispec.StaleOptions{DriverRoot: driverRoot, DevRoot: devRoot})
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	stale := map[string]bool{}
	for _, s := range r.Stale {
		stale[s.Spec] = true
		fmt.Fprintf(e.Stdout, "%s: stale\n", s.Spec)
		for _, p := range s.Problems {
			fmt.Fprintf(e.Stdout, "  %s\n", p)
		}
		if len(s.Missing) > 1 {
			e.log.Debug("missing paths", "spec", s.Spec, "paths", strings.Join(s.Missing, ","))
		}
		fmt.Fprintf(e.Stdout, "  fix: %s\n", s.Fix)
	}
	for _, msg := range r.Errors {
		fmt.Fprintf(e.Stdout, "%s\n  fix: remove or fix the file, or regenerate it with nvidia-ctk cdi generate\n", msg)
	}
	for _, p := range r.Specs {
		if !stale[p] {
			fmt.Fprintf(e.Stdout, "%s: ok\n", p)
		}
	}
	if n := len(r.Stale) + len(r.Errors); n > 0 {
		return fmt.Errorf("%s: %d of %d CDI spec(s) stale or broken", e.path, n, len(r.Specs)+len(r.Errors))
	}
	if len(r.Specs) == 0 {
		e.log.Warn("no CDI spec found", "dirs", strings.Join(dirs, ","))
	}
	return nil
}
