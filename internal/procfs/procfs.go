// Package procfs parses the files the NVIDIA kernel driver exposes under
// /proc (and /proc/devices), as pure functions over their contents. The
// Read* helpers only add a bounded read of one named file.
//
// Every parser rejects malformed input with an error naming the line and
// field at fault; none panics on any input.
package procfs

import (
	"fmt"
	"strings"

	"github.com/nctk/nctk/internal/hostfile"
)

// Well-known paths (relative to a root; join with the driver root or "/").
const (
	VersionPath      = "/proc/driver/nvidia/version"
	ParamsPath       = "/proc/driver/nvidia/params"
	RegistryPath     = "/proc/driver/nvidia/registry"
	GPUsDir          = "/proc/driver/nvidia/gpus" // <bus>/information
	CapabilitiesDir  = "/proc/driver/nvidia/capabilities"
	MIGMinorsPath    = "/proc/driver/nvidia-caps/mig-minors"
	DevicesPath      = "/proc/devices"
	InformationFile  = "information"
	maxProcFileBytes = hostfile.MaxProc
)

// ErrTooLarge is returned by ReadFile for files over the size limit.
var ErrTooLarge = hostfile.ErrTooLarge

// ReadFile reads a small proc file with hostfile.ReadFile: a FIFO, socket
// or device in its place is refused at once, and more than 4 MiB is an
// error (proc files report size 0, so the size is not trusted). Errors
// name path.
func ReadFile(path string) ([]byte, error) {
	return hostfile.ReadFile(path, maxProcFileBytes)
}

// read reads path and parses it with parse, naming path in errors.
func read[T any](path string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	data, err := ReadFile(path)
	if err != nil {
		return zero, err
	}
	v, err := parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ReadVersion reads and parses a version file (VersionPath).
func ReadVersion(path string) (Version, error) { return read(path, ParseVersion) }

// ReadGPUInformation reads and parses a gpus/<bus>/information file.
func ReadGPUInformation(path string) (GPUInfo, error) { return read(path, ParseGPUInformation) }

// ReadParams reads and parses a params file (ParamsPath).
func ReadParams(path string) (Params, error) { return read(path, ParseParams) }

// ReadDevices reads and parses /proc/devices.
func ReadDevices(path string) (Devices, error) { return read(path, ParseDevices) }

// ReadMIGMinors reads and parses a mig-minors file (MIGMinorsPath).
func ReadMIGMinors(path string) (map[string]uint32, error) { return read(path, ParseMIGMinors) }

// lines calls fn for each line of data (1-based numbers, without the
// newline and a trailing CR), stopping at the first error. The lines are
// substrings of one copy of data.
func lines(data []byte, fn func(n int, line string) error) error {
	s := string(data)
	for n := 1; len(s) > 0; n++ {
		var l string
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			l, s = s[:i], s[i+1:]
		} else {
			l, s = s, ""
		}
		if err := fn(n, strings.TrimSuffix(l, "\r")); err != nil {
			return err
		}
	}
	return nil
}

// keyValue splits a "Key: value" line at its first colon and trims blanks
// around both parts.
func keyValue(line string) (key, value string, ok bool) {
	k, v, ok := strings.Cut(line, ":")
	if !ok {
		return "", "", false
	}
	return strings.Trim(k, " \t"), strings.Trim(v, " \t"), true
}

// keyValueLines calls fn for each "Key: value" line of data, skipping blank
// lines. A line without a colon or a key seen before is an error. It
// returns the keys seen.
func keyValueLines(data []byte, fn func(n int, key, value string) error) (map[string]bool, error) {
	seen := map[string]bool{}
	err := lines(data, func(n int, line string) error {
		if isBlank(line) {
			return nil
		}
		k, v, ok := keyValue(line)
		if !ok {
			return fmt.Errorf("line %d: %q is not a \"Key: value\" line", n, line)
		}
		if seen[k] {
			return fmt.Errorf("line %d: duplicate %q", n, k)
		}
		seen[k] = true
		return fn(n, k, v)
	})
	return seen, err
}

// isBlank reports whether line holds only spaces and tabs.
func isBlank(line string) bool { return strings.Trim(line, " \t") == "" }
