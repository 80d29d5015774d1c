// Package selector resolves NVIDIA's device selection language (the value of
// NVIDIA_VISIBLE_DEVICES after the request's special words, and of
// nvidia-container-cli --device) against the discovered GPUs.
//
// A list is comma-separated; empty items are ignored and duplicates removed.
// Each token is, in this order of recognition:
//
//   - all (any case): every GPU and every MIG device; the rest of the list
//     is not looked at, as in NVIDIA's CLI;
//   - a GPU UUID, GPU-… (full UUID, any case);
//   - a PCI bus id, domain:bus:device.function in hex with optional leading
//     zeros (the domain may be left out); only function 0 names a GPU;
//   - a decimal index, below the number of GPUs, in enumeration (PCI bus
//     id) order, not the device minor;
//   - a MIG UUID, MIG-… (any case), or the old MIG-GPU-<uuid>/<gi>/<ci> form;
//   - gpu:mig, two decimal indices: MIG device mig of GPU gpu.
//
// Selecting a MIG device selects its parent GPU too. Unlike NVIDIA's CLI,
// which skips selection silently on a host without GPUs, asking for a GPU
// on such a host is an error.
package selector

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/discover"
	"github.com/nctk/nctk/internal/echo"
)

// SelectedMIG is a selected MIG device with its parent GPU.
type SelectedMIG struct {
	Parent discover.GPU
	MIG    discover.MIGDevice
}

// Name is the MIG device's "gpu:mig" index form.
func (m SelectedMIG) Name() string { return fmt.Sprintf("%d:%d", m.Parent.Index, m.MIG.Index) }

// Selection is the result of resolving a device list.
type Selection struct {
	// GPUs are the selected GPUs, in the order first named, parents of
	// selected MIG devices included.
	GPUs []discover.GPU
	// MIG are the selected MIG devices in the order first named.
	MIG []SelectedMIG
	// All is true when the list held "all".
	All bool
}

// Error reports a token that names no device of this host. Its text has
// no phase prefix: callers that print NVIDIA's "device error: " wrap it
// (internal/phase).
type Error struct {
	// Token is the offending list item.
	Token string
	// Reason says why it names nothing (may be "").
	Reason string
	// Hint lists what the host has.
	Hint string
}

// Error echoes Token with echo.Text (control characters escaped, a long
// token cut), and bounds Reason, which may quote parts of the token.
func (e *Error) Error() string {
	msg := echo.Text(e.Token) + ": unknown device"
	if e.Reason != "" {
		msg += " (" + echo.Line(e.Reason, maxReason) + ")"
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// maxReason bounds an Error's Reason in its text.
const maxReason = 512

// NoGPUError reports a device request on a host where discovery found no
// GPU. Like Error, its text has no phase prefix.
type NoGPUError struct {
	// Request is the device list as asked.
	Request string
	// Source names where the list came from; Resolve sets
	// NVIDIA_VISIBLE_DEVICES, callers with another source (--device) may
	// change it.
	Source string
}

func (e *NoGPUError) Error() string {
	src := e.Source
	if src == "" {
		src = "the device list"
	}
	return fmt.Sprintf("no NVIDIA GPU found on this host but %s asks for %s", src, echo.Quote(e.Request))
}

// Split splits a comma-separated device list into tokens, trimming
// whitespace and dropping empty items.
func Split(list string) []string {
	var out []string
	for item := range strings.SplitSeq(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Resolve resolves device tokens against the driver's GPUs. A token may
// itself be a comma-separated list. No tokens (after dropping empty ones)
// select nothing and are not an error. Errors are *Error for a token that
// names no device and *NoGPUError when the host has no GPU at all.
func Resolve(d *discover.Driver, tokens []string) (Selection, error) {
	var items []string
	for _, t := range tokens {
		items = append(items, Split(t)...)
	}
	if len(items) == 0 {
		return Selection{}, nil
	}
	if d == nil || len(d.GPUs) == 0 {
		return Selection{}, &NoGPUError{Request: strings.Join(items, ","), Source: "NVIDIA_VISIBLE_DEVICES"}
	}
	r := resolver{d: d, gpuSeen: map[int]bool{}, migSeen: map[[2]int]bool{}}
	for _, tok := range items {
		if strings.EqualFold(tok, "all") {
			return r.all(), nil
		}
		if err := r.add(tok); err != nil {
			return Selection{}, err
		}
	}
	return r.sel, nil
}

// resolver accumulates a selection, deduplicating by position.
type resolver struct {
	d       *discover.Driver
	sel     Selection
	gpuSeen map[int]bool    // by position in d.GPUs
	migSeen map[[2]int]bool // by (GPU position, MIG position)
}

func (r *resolver) all() Selection {
	s := Selection{All: true, GPUs: append([]discover.GPU(nil), r.d.GPUs...)}
	for _, g := range r.d.GPUs {
		if !g.MIGEnabled {
			continue
		}
		for _, m := range g.MIGDevices {
			s.MIG = append(s.MIG, SelectedMIG{Parent: g, MIG: m})
		}
	}
	return s
}

func (r *resolver) addGPU(gi int) {
	if !r.gpuSeen[gi] {
		r.gpuSeen[gi] = true
		r.sel.GPUs = append(r.sel.GPUs, r.d.GPUs[gi])
	}
}

func (r *resolver) addMIG(gi, mi int) {
	r.addGPU(gi)
	if k := [2]int{gi, mi}; !r.migSeen[k] {
		r.migSeen[k] = true
		g := r.d.GPUs[gi]
		r.sel.MIG = append(r.sel.MIG, SelectedMIG{Parent: g, MIG: g.MIGDevices[mi]})
	}
}

// add resolves one token.
func (r *resolver) add(tok string) error {
	upper := strings.ToUpper(tok)
	switch {
	case strings.HasPrefix(upper, "GPU-"):
		for i, g := range r.d.GPUs {
			if g.UUID != "" && strings.EqualFold(g.UUID, tok) {
				r.addGPU(i)
				return nil
			}
		}
		return r.unknown(tok, "no GPU has this UUID (UUIDs must be given in full)")
	case strings.HasPrefix(upper, "MIG-GPU-"):
		return r.addOldMIG(tok)
	case strings.HasPrefix(upper, "MIG-"):
		for i, g := range r.d.GPUs {
			for j, m := range g.MIGDevices {
				if m.UUID != "" && strings.EqualFold(m.UUID, tok) {
					r.addMIG(i, j)
					return nil
				}
			}
		}
		return r.unknown(tok, "no MIG device has this UUID")
	case strings.Contains(tok, "/") && strings.Contains(tok, "="):
		return r.unknown(tok, "a CDI device name; it is injected through CDI, not by the device list")
	case strings.Contains(tok, "."):
		return r.addBusID(tok)
	case isDigits(tok):
		gi, ok := r.byIndex(tok)
		if !ok {
			return r.unknown(tok, fmt.Sprintf("index out of range: the host has %s", countGPUs(len(r.d.GPUs))))
		}
		r.addGPU(gi)
		return nil
	case strings.Contains(tok, ":"):
		return r.addMIGIndex(tok)
	case strings.HasPrefix(tok, "-") && isDigits(tok[1:]):
		return r.unknown(tok, "negative index")
	}
	return r.unknown(tok, "want all, an index, a GPU or MIG UUID, a PCI bus id or gpu:mig")
}

// byIndex finds the GPU whose enumeration index is the decimal s and
// returns its position in d.GPUs.
func (r *resolver) byIndex(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n >= len(r.d.GPUs) {
		return 0, false
	}
	for i, g := range r.d.GPUs {
		if g.Index == n {
			return i, true
		}
	}
	return 0, false
}

// addMIGIndex resolves "gpu:mig".
func (r *resolver) addMIGIndex(tok string) error {
	gs, ms, _ := strings.Cut(tok, ":")
	if !isDigits(gs) || !isDigits(ms) {
		return r.unknown(tok, "want gpu:mig with two decimal indices, or a PCI bus id domain:bus:device.0")
	}
	gi, ok := r.byIndex(gs)
	if !ok {
		return r.unknown(tok, fmt.Sprintf("GPU index %s out of range: the host has %s", gs, countGPUs(len(r.d.GPUs))))
	}
	g := r.d.GPUs[gi]
	if !g.MIGEnabled || len(g.MIGDevices) == 0 {
		return r.unknown(tok, fmt.Sprintf("GPU %d has no MIG devices (MIG %s)", g.Index, migState(g)))
	}
	mi, err := strconv.Atoi(ms)
	if err == nil {
		for j, m := range g.MIGDevices {
			if m.Index == mi {
				r.addMIG(gi, j)
				return nil
			}
		}
	}
	return r.unknown(tok, fmt.Sprintf("GPU %d has no MIG device %s", g.Index, ms))
}

// addOldMIG resolves MIG-GPU-<uuid>/<gi>/<ci>.
func (r *resolver) addOldMIG(tok string) error {
	parts := strings.Split(tok[len("MIG-"):], "/")
	if len(parts) != 3 || !isDigits(parts[1]) || !isDigits(parts[2]) {
		return r.unknown(tok, "want MIG-GPU-<uuid>/<gi>/<ci>")
	}
	gi, err1 := strconv.Atoi(parts[1])
	ci, err2 := strconv.Atoi(parts[2])
	for i, g := range r.d.GPUs {
		if !strings.EqualFold(g.UUID, parts[0]) {
			continue
		}
		if err1 == nil && err2 == nil {
			for j, m := range g.MIGDevices {
				if m.GI == gi && m.CI == ci {
					r.addMIG(i, j)
					return nil
				}
			}
		}
		return r.unknown(tok, fmt.Sprintf("GPU %d has no MIG device with GPU instance %s and compute instance %s", g.Index, parts[1], parts[2]))
	}
	return r.unknown(tok, "no GPU has this UUID")
}

// addBusID resolves a PCI bus id.
func (r *resolver) addBusID(tok string) error {
	want, fn, err := parseBusID(tok)
	if err != nil {
		return r.unknown(tok, err.Error())
	}
	if fn != 0 {
		return r.unknown(tok, fmt.Sprintf("PCI function %x: GPUs are named by function 0", fn))
	}
	for i, g := range r.d.GPUs {
		if have, _, err := parseBusID(g.BusID); err == nil && have == want {
			r.addGPU(i)
			return nil
		}
	}
	return r.unknown(tok, "no GPU at this PCI bus id")
}

// busAddr is a PCI address without the function.
type busAddr struct {
	domain    uint32
	bus, slot uint8
}

// parseBusID parses [domain:]bus:device.function, all hex, as NVIDIA
// normalises it (%08x:%02x:%02x.0).
func parseBusID(s string) (busAddr, uint64, error) {
	head, fnStr, ok := strings.Cut(s, ".")
	if !ok {
		return busAddr{}, 0, fmt.Errorf("PCI bus id %q lacks .function", s)
	}
	fields := strings.Split(head, ":")
	if len(fields) == 2 {
		fields = append([]string{"0"}, fields...)
	}
	if len(fields) != 3 {
		return busAddr{}, 0, fmt.Errorf("want a PCI bus id domain:bus:device.function")
	}
	dom, err := parseHex(fields[0], 32)
	if err != nil {
		return busAddr{}, 0, fmt.Errorf("PCI domain %q: %w", fields[0], err)
	}
	bus, err := parseHex(fields[1], 8)
	if err != nil {
		return busAddr{}, 0, fmt.Errorf("PCI bus %q: %w", fields[1], err)
	}
	slot, err := parseHex(fields[2], 8)
	if err != nil {
		return busAddr{}, 0, fmt.Errorf("PCI device %q: %w", fields[2], err)
	}
	fn, err := parseHex(fnStr, 8)
	if err != nil {
		return busAddr{}, 0, fmt.Errorf("PCI function %q: %w", fnStr, err)
	}
	return busAddr{domain: uint32(dom), bus: uint8(bus), slot: uint8(slot)}, fn, nil
}

func parseHex(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty")
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !(s[i] >= '0' && s[i] <= '9') && !(c >= 'a' && c <= 'f') {
			return 0, fmt.Errorf("not hexadecimal")
		}
	}
	v, err := strconv.ParseUint(s, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("out of range")
	}
	return v, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func countGPUs(n int) string {
	if n == 1 {
		return "1 GPU (index 0)"
	}
	return fmt.Sprintf("%d GPUs (indices 0-%d)", n, n-1)
}

func migState(g discover.GPU) string {
	switch {
	case !g.MIGCapable:
		return "not supported"
	case !g.MIGEnabled:
		return "disabled"
	}
	return "enabled, no instances"
}

// maxHint bounds how many GPUs a hint lists.
const maxHint = 16

// unknown builds an *Error with a hint listing the host's GPUs and MIG
// devices: "host has GPUs 0-3: 0 GPU-…, 1 GPU-… (MIG 1:0 MIG-…)".
func (r *resolver) unknown(tok, reason string) error {
	return &Error{Token: tok, Reason: reason, Hint: Hint(r.d)}
}

// Hint describes a driver's GPUs for error messages: "host has GPUs 0-1:
// 0 GPU-… (00000000:41:00.0), 1 GPU-… (00000000:81:00.0; MIG 1:0 MIG-…)".
func Hint(d *discover.Driver) string {
	if d == nil || len(d.GPUs) == 0 {
		return "host has no GPU"
	}
	var b strings.Builder
	if len(d.GPUs) == 1 {
		b.WriteString("host has GPU 0: ")
	} else {
		fmt.Fprintf(&b, "host has GPUs 0-%d: ", len(d.GPUs)-1)
	}
	for i, g := range d.GPUs {
		if i == maxHint {
			fmt.Fprintf(&b, ", … (%d more)", len(d.GPUs)-maxHint)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s (%s", g.Index, orUnknown(g.UUID), orUnknown(g.BusID))
		if g.MIGEnabled {
			for _, m := range g.MIGDevices {
				fmt.Fprintf(&b, "; MIG %d:%d %s", g.Index, m.Index, orUnknown(m.UUID))
			}
		}
		b.WriteString(")")
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}
