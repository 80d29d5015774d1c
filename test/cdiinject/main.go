// Command cdiinject applies CDI devices to an OCI config.json with the CDI
// library, as an engine with native CDI support does (podman, Docker 25+
// --device, containerd's CRI): it is the engine's part of those paths for
// scripts/check-real-host-containers.sh on hosts that have no such engine.
//
// Usage: cdiinject [-drop-hooks] SPEC_DIR DEVICE... <config.json >config.json
//
// -drop-hooks removes the hooks the devices added (the floor: what runc
// alone costs on the spec's mounts and device nodes).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
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
	if err := fs.Parse(args); err != nil {
		return err
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
