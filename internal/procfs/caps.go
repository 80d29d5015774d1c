package procfs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Names in /proc/driver/nvidia-caps/mig-minors.
const (
	MIGConfig  = "config"
	MIGMonitor = "monitor"
)

// MIGGIKey returns the mig-minors name of a GPU instance's access
// capability: "gpu<minor>/gi<gi>/access".
func MIGGIKey(gpuMinor, gi int) string { return fmt.Sprintf("gpu%d/gi%d/access", gpuMinor, gi) }

// MIGCIKey returns the mig-minors name of a compute instance's access
// capability: "gpu<minor>/gi<gi>/ci<ci>/access".
func MIGCIKey(gpuMinor, gi, ci int) string {
	return fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpuMinor, gi, ci)
}

// maxCapMinor bounds nvidia-caps minors (a 20-bit Linux minor).
const maxCapMinor = 1<<20 - 1

// ParseMIGMinors parses /proc/driver/nvidia-caps/mig-minors: one
// "<name> <minor>" line per capability ("config 1", "monitor 2",
// "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13"). Duplicate names are an
// error.
func ParseMIGMinors(data []byte) (map[string]uint32, error) {
	m := make(map[string]uint32, bytes.Count(data, []byte{'\n'})+1)
	err := lines(data, func(n int, line string) error {
		t := strings.Trim(line, " \t")
		if t == "" {
			return nil
		}
		i := strings.IndexAny(t, " \t")
		if i < 0 {
			return fmt.Errorf("line %d: %q: want \"<name> <minor>\"", n, line)
		}
		name, num := t[:i], strings.TrimLeft(t[i:], " \t")
		if strings.ContainsAny(num, " \t") {
			return fmt.Errorf("line %d: %q: want \"<name> <minor>\"", n, line)
		}
		minor, err := strconv.ParseUint(num, 10, 32)
		if err != nil || minor > maxCapMinor {
			return fmt.Errorf("line %d: %s: minor %q is not a number in [0,%d]", n, name, num, maxCapMinor)
		}
		if _, dup := m[name]; dup {
			return fmt.Errorf("line %d: duplicate name %q", n, name)
		}
		m[name] = uint32(minor)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// CapAccess is a capability access file under
// /proc/driver/nvidia/capabilities (…/mig/config, …/gpu0/mig/gi1/access):
// the nvidia-caps device node guarding the capability.
type CapAccess struct {
	Minor uint32
	// Mode is the permission bits the driver wants for the node
	// ("DeviceFileMode: 292" is 0444); 0 if absent.
	Mode uint32
	// Modify is DeviceFileModify; true if absent.
	Modify bool
}

// Fields of a capability access file.
const (
	capMinor  = "DeviceFileMinor"
	capMode   = "DeviceFileMode"
	capModify = "DeviceFileModify"
)

// ParseCapAccess parses a capability access file and returns its device
// minor ("DeviceFileMinor: 12").
func ParseCapAccess(data []byte) (uint32, error) {
	c, err := ParseCapAccessFile(data)
	return c.Minor, err
}

// ParseCapAccessFile parses a capability access file:
//
//	DeviceFileMinor: 12
//	DeviceFileMode: 292
//	DeviceFileModify: 1
//
// DeviceFileMinor is required; unknown keys are ignored.
func ParseCapAccessFile(data []byte) (CapAccess, error) {
	c := CapAccess{Modify: true}
	seen, err := keyValueLines(data, func(n int, k, v string) error {
		var max uint64
		switch k {
		case capMinor:
			max = maxCapMinor
		case capMode:
			max = 0o7777
		case capModify:
			max = 1
		default:
			return nil
		}
		x, err := strconv.ParseUint(v, 10, 32)
		if err != nil || x > max {
			return fmt.Errorf("line %d: %s %q: want a decimal number in [0,%d]", n, k, v, max)
		}
		switch k {
		case capMinor:
			c.Minor = uint32(x)
		case capMode:
			c.Mode = uint32(x)
		case capModify:
			c.Modify = x == 1
		}
		return nil
	})
	if err != nil {
		return CapAccess{}, err
	}
	if !seen[capMinor] {
		return CapAccess{}, fmt.Errorf("no %q line", capMinor)
	}
	return c, nil
}
