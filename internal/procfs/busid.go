package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// NormalizeBusID converts a PCI address to NVIDIA's form with an 8-digit
// domain, lower-case hex: "0000:41:00.0", "41:00.0" and "00000000:41:00.0"
// all give "00000000:41:00.0". The domain has 1–8 hex digits (0 if
// omitted), the bus 1–2, the device 1–2 (at most 0x1f) and the function one
// digit 0–7, which is kept (device selection compares against ".0").
func NormalizeBusID(s string) (string, error) {
	dom, bus, dev, fn, err := parseBusID(s)
	if err != nil {
		return "", fmt.Errorf("PCI bus id %q: %w", s, err)
	}
	return fmt.Sprintf("%08x:%02x:%02x.%x", dom, bus, dev, fn), nil
}

func parseBusID(s string) (dom, bus, dev, fn uint64, err error) {
	head, f, ok := strings.Cut(s, ".")
	if !ok {
		return 0, 0, 0, 0, fmt.Errorf("no .function")
	}
	parts := strings.Split(head, ":")
	switch len(parts) {
	case 2:
		parts = append([]string{"0"}, parts...)
	case 3:
	default:
		return 0, 0, 0, 0, fmt.Errorf("want [domain:]bus:device.function")
	}
	fields := []struct {
		name   string
		s      string
		digits int
		max    uint64
		out    *uint64
	}{
		{"domain", parts[0], 8, 0xffffffff, &dom},
		{"bus", parts[1], 2, 0xff, &bus},
		{"device", parts[2], 2, 0x1f, &dev},
		{"function", f, 1, 7, &fn},
	}
	for _, fd := range fields {
		if fd.s == "" || len(fd.s) > fd.digits {
			return 0, 0, 0, 0, fmt.Errorf("%s %q: want 1 to %d hex digits", fd.name, fd.s, fd.digits)
		}
		for _, c := range []byte(fd.s) {
			if !isHex(c) {
				return 0, 0, 0, 0, fmt.Errorf("%s %q: not hexadecimal", fd.name, fd.s)
			}
		}
		v, _ := strconv.ParseUint(fd.s, 16, 64) // cannot fail: ≤ 8 hex digits
		if v > fd.max {
			return 0, 0, 0, 0, fmt.Errorf("%s %q: over %#x", fd.name, fd.s, fd.max)
		}
		*fd.out = v
	}
	return dom, bus, dev, fn, nil
}
