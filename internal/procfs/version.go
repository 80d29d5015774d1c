package procfs

import (
	"fmt"
	"strings"
)

// Version is the content of /proc/driver/nvidia/version.
type Version struct {
	// NVRM is the kernel module version, e.g. "580.159.04" (usually three
	// numbers, sometimes two such as "595.84"; internal builds may carry a
	// non-numeric tag).
	NVRM string
	// Open is true for the open GPU kernel modules
	// ("NVIDIA UNIX Open Kernel Module for x86_64").
	Open bool
	// Arch is the architecture named in the line: x86_64, aarch64, ppc64le.
	Arch string
	// GCC is the "GCC version:" line's value, "" if absent.
	GCC string
	// Raw is the NVRM line without the "NVRM version:" prefix, trimmed.
	Raw string
}

const (
	nvrmPrefix   = "NVRM version:"
	gccPrefix    = "GCC version:"
	kernelModule = "Kernel Module"
)

// ParseVersion parses /proc/driver/nvidia/version. It accepts both
// wordings:
//
//	NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 10:11:16 UTC 2025
//	NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.04  Release Build  (…)  Thu …
func ParseVersion(data []byte) (Version, error) {
	var v Version
	found := false
	err := lines(data, func(n int, line string) error {
		line = strings.Trim(line, " \t")
		switch {
		case strings.HasPrefix(line, nvrmPrefix):
			if found {
				return fmt.Errorf("line %d: second %q line", n, nvrmPrefix)
			}
			found = true
			raw := strings.Trim(line[len(nvrmPrefix):], " \t")
			parsed, err := parseNVRM(raw)
			if err != nil {
				return fmt.Errorf("line %d: %s %q: %w", n, nvrmPrefix, raw, err)
			}
			v = parsed
		case strings.HasPrefix(line, gccPrefix):
			v.GCC = strings.Trim(line[len(gccPrefix):], " \t")
		}
		return nil
	})
	if err != nil {
		return Version{}, err
	}
	if !found {
		return Version{}, fmt.Errorf("no %q line", nvrmPrefix)
	}
	return v, nil
}

// parseNVRM parses the text after "NVRM version:".
func parseNVRM(raw string) (Version, error) {
	v := Version{Raw: raw}
	head, tail, ok := strings.Cut(raw, kernelModule)
	if !ok {
		return Version{}, fmt.Errorf("no %q", kernelModule)
	}
	// head: "NVIDIA UNIX x86_64 " or "NVIDIA UNIX Open "; tail: " 580.… " or
	// " for x86_64  580.…".
	before := strings.Fields(head)
	after := strings.Fields(tail)
	if len(before) > 0 && before[len(before)-1] == "Open" {
		v.Open = true
		before = before[:len(before)-1]
	}
	if len(after) > 0 && after[0] == "for" {
		if len(after) < 2 {
			return Version{}, fmt.Errorf("no architecture after %q", kernelModule+" for")
		}
		v.Arch, after = after[1], after[2:]
	} else if len(before) > 0 && before[len(before)-1] != "UNIX" {
		v.Arch = before[len(before)-1]
	}
	if len(after) == 0 {
		return Version{}, fmt.Errorf("no version after %q", kernelModule)
	}
	if !validVersion(after[0]) {
		return Version{}, fmt.Errorf("bad version %q", after[0])
	}
	v.NVRM = after[0]
	return v, nil
}

// validVersion accepts a version token: letters, digits, '.', '-', '_',
// starting with a letter or digit.
func validVersion(s string) bool {
	for i, c := range []byte(s) {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case (c == '.' || c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return s != ""
}
