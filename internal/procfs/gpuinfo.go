package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// GPUInfo is the content of /proc/driver/nvidia/gpus/<bus>/information.
type GPUInfo struct {
	Model string
	// UUID is "GPU-<8>-<4>-<4>-<4>-<12>" as the driver prints it.
	UUID string
	// BusLocation is the bus id as the driver prints it (0000:41:00.0;
	// also the directory name under /proc/driver/nvidia/gpus), and BusID
	// its normalized form (00000000:41:00.0, see NormalizeBusID).
	BusLocation string
	BusID       string
	Minor       int
	IRQ         int
	VideoBIOS   string
	BusType     string
	// Firmware is the GSP firmware version ("GPU Firmware:"), "" if absent.
	Firmware string
	Excluded bool
}

// Field names in the information file.
const (
	fieldModel       = "Model"
	fieldIRQ         = "IRQ"
	fieldUUID        = "GPU UUID"
	fieldVideoBIOS   = "Video BIOS"
	fieldBusType     = "Bus Type"
	fieldBusLocation = "Bus Location"
	fieldMinor       = "Device Minor"
	fieldFirmware    = "GPU Firmware"
	fieldExcluded    = "GPU Excluded"
	maxMinor         = 1 << 20 // Linux minor numbers are 20 bits
)

// ParseGPUInformation parses a gpus/<bus>/information file: "Key: value"
// lines, blanks (spaces/tabs) around both. Bus Location and Device Minor
// are required, and GPU UUID unless the GPU is excluded; unknown keys are
// ignored.
func ParseGPUInformation(data []byte) (GPUInfo, error) {
	var g GPUInfo
	seen, err := keyValueLines(data, func(n int, k, v string) error {
		var err error
		switch k {
		case fieldModel:
			g.Model = v
		case fieldUUID:
			if !validGPUUUID(v) {
				err = fmt.Errorf("not a GPU UUID")
			}
			g.UUID = v
		case fieldBusLocation:
			g.BusLocation = v
			g.BusID, err = NormalizeBusID(v)
		case fieldMinor:
			g.Minor, err = parseInt(v, maxMinor-1)
		case fieldIRQ:
			g.IRQ, err = parseInt(v, 1<<31-1)
		case fieldVideoBIOS:
			g.VideoBIOS = v
		case fieldBusType:
			g.BusType = v
		case fieldFirmware:
			g.Firmware = v
		case fieldExcluded:
			switch v {
			case "Yes":
				g.Excluded = true
			case "No":
			default:
				err = fmt.Errorf("want Yes or No")
			}
		}
		if err != nil {
			return fmt.Errorf("line %d: %s %q: %w", n, k, v, err)
		}
		return nil
	})
	if err != nil {
		return GPUInfo{}, err
	}
	for _, f := range []string{fieldBusLocation, fieldMinor, fieldUUID} {
		if !seen[f] && (f != fieldUUID || !g.Excluded) {
			return GPUInfo{}, fmt.Errorf("no %q line", f)
		}
	}
	return g, nil
}

// parseInt parses a decimal integer in [0, max].
func parseInt(s string, max int) (int, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > uint64(max) {
		return 0, fmt.Errorf("want a decimal number in [0,%d]", max)
	}
	return int(n), nil
}

// validGPUUUID checks "GPU-" followed by a hyphenated 128-bit hex UUID.
func validGPUUUID(s string) bool {
	rest, ok := strings.CutPrefix(s, "GPU-")
	if !ok || len(rest) != 36 {
		return false
	}
	for i, c := range []byte(rest) {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !isHex(c) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
