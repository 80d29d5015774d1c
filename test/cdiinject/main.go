// Command cdiinject applies CDI devices to an OCI config.json with the CDI
// library, as an engine with native CDI support does (podman, Docker 25+
// --device, containerd's CRI): it is the engine's part of those paths for
// scripts/check-real-host-containers.sh on hosts that have no such engine.
//
// Usage: cdiinject [-drop-hooks] SPEC_DIR DEVICE... <config.json >config.json
//
//	cdiinject -count-starts PROGRAM COMMAND [ARG]...
//
// -drop-hooks removes the hooks the devices added (the floor: what runc
// alone costs on the spec's mounts and device nodes). -count-starts runs
// COMMAND (its output passed through) and then prints
// "hook-starts=N": how often PROGRAM was started (opened) meanwhile, as
// the script reports for each engine-applied path.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nctk/nctk/internal/e2e/starts"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cdiinject:", err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("cdiinject", flag.ContinueOnError)
	dropHooks := fs.Bool("drop-hooks", false, "leave out the hooks the devices add")
	countStarts := fs.String("count-starts", "", "run the command given and count the starts of this program")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *countStarts != "" {
		return runCounting(*countStarts, fs.Args(), out)
	}
	if fs.NArg() < 2 {
		return fmt.Errorf("usage: cdiinject [-drop-hooks] SPEC_DIR DEVICE... <config.json >config.json")
	}
	var s specs.Spec
	if err := json.NewDecoder(in).Decode(&s); err != nil {
		return fmt.Errorf("config.json on stdin: %w", err)
	}
	var hooks *specs.Hooks
	if s.Hooks != nil {
		h := *s.Hooks // the library appends to the struct it is given
		hooks = &h
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(fs.Arg(0)), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("CDI specs in %s: %w", fs.Arg(0), err)
	}
	if _, err := cache.InjectDevices(&s, fs.Args()[1:]...); err != nil {
		return fmt.Errorf("inject %v: %w", fs.Args()[1:], err)
	}
	if *dropHooks {
		s.Hooks = hooks
	}
	return json.NewEncoder(out).Encode(&s)
}

// runCounting runs argv (its output to out and stderr), counting the
// starts of program meanwhile (starts.During), and prints "hook-starts=N"
// to out. The command's failure is returned after the count.
func runCounting(program string, argv []string, out io.Writer) error {
	if len(argv) == 0 {
		return fmt.Errorf("usage: cdiinject -count-starts PROGRAM COMMAND [ARG...]")
	}
	n, err := starts.During(program, func() error {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		return cmd.Run()
	})
	fmt.Fprintf(out, "hook-starts=%d\n", n)
	return err
}
