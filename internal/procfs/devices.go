package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// Device is one "major name" line of /proc/devices.
type Device struct {
	Major uint32
	Name  string
}

// Devices is /proc/devices: the registered character and block majors in
// file order. A name may appear with several majors (block "sd"), and a
// major with several names (char 4: tty, ttyS).
type Devices struct {
	Char  []Device
	Block []Device
}

// Character device names the NVIDIA drivers register.
const (
	DevNVIDIA               = "nvidia"          // GPUs and nvidiactl (195) on current drivers
	DevNVIDIAFrontend       = "nvidia-frontend" // the same, on older drivers
	DevNVIDIAUVM            = "nvidia-uvm"
	DevNVIDIACaps           = "nvidia-caps"
	DevNVIDIACapsIMEX       = "nvidia-caps-imex-channels"
	DevNVIDIANVSwitch       = "nvidia-nvswitch"
	DevNVIDIANVLink         = "nvidia-nvlink"
	maxMajor                = 4095 // Linux majors are 12 bits
	sectionChar, sectionBlk = "Character devices:", "Block devices:"
)

// CharMajor returns the first major of the character device name.
func (d Devices) CharMajor(name string) (uint32, bool) { return lookupMajor(d.Char, name) }

// GPUMajor returns the major of the GPU device nodes (/dev/nvidia*):
// "nvidia-frontend" if registered, else "nvidia".
func (d Devices) GPUMajor() (uint32, bool) {
	if m, ok := d.CharMajor(DevNVIDIAFrontend); ok {
		return m, true
	}
	return d.CharMajor(DevNVIDIA)
}

func lookupMajor(ds []Device, name string) (uint32, bool) {
	for _, d := range ds {
		if d.Name == name {
			return d.Major, true
		}
	}
	return 0, false
}

// ParseDevices parses /proc/devices: a "Character devices:" and a "Block
// devices:" section of "<major> <name>" lines, blank lines between.
func ParseDevices(data []byte) (Devices, error) {
	var d Devices
	var cur *[]Device
	err := lines(data, func(n int, line string) error {
		t := strings.Trim(line, " \t")
		switch t {
		case "":
			return nil
		case sectionChar:
			if cur != nil {
				return fmt.Errorf("line %d: %q after another section", n, t)
			}
			cur = &d.Char
			return nil
		case sectionBlk:
			if cur == &d.Block {
				return fmt.Errorf("line %d: second %q", n, t)
			}
			cur = &d.Block
			return nil
		}
		if cur == nil {
			return fmt.Errorf("line %d: %q before %q", n, line, sectionChar)
		}
		num, name, ok := strings.Cut(t, " ")
		name = strings.Trim(name, " \t")
		if !ok || name == "" {
			return fmt.Errorf("line %d: %q: want \"<major> <name>\"", n, line)
		}
		major, err := strconv.ParseUint(num, 10, 32)
		if err != nil || major > maxMajor {
			return fmt.Errorf("line %d: %q: major %q is not a number in [0,%d]", n, line, num, maxMajor)
		}
		*cur = append(*cur, Device{Major: uint32(major), Name: name})
		return nil
	})
	if err != nil {
		return Devices{}, err
	}
	if cur == nil {
		return Devices{}, fmt.Errorf("no %q section", sectionChar)
	}
	return d, nil
}
