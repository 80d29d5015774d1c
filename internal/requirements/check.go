package requirements

import (
	"fmt"
	"log/slog"
	"strings"
)

// DeviceFacts describes one selected device (a GPU, or a MIG device with its
// parent GPU's arch and brand).
type DeviceFacts struct {
	// Index names the device in messages: "0" for a GPU, "0:1" for a MIG
	// device.
	Index string
	UUID  string
	// Arch is the compute capability, major.minor ("" if unknown).
	Arch string
	// Brand is the NVML brand name (Tesla, GeForce, Nvidia, …; "" if
	// unknown).
	Brand string
}

// name renders the device for messages: `GPU 0 (GPU-…)`.
func (d DeviceFacts) name() string {
	kind := "GPU"
	if strings.Contains(d.Index, ":") {
		kind = "MIG device"
	}
	switch {
	case d.Index != "" && d.UUID != "":
		return fmt.Sprintf("%s %s (%s)", kind, d.Index, d.UUID)
	case d.UUID != "":
		return d.UUID
	case d.Index != "":
		return kind + " " + d.Index
	}
	return "the GPU"
}

// Facts are the host values requirements are checked against.
type Facts struct {
	// CUDA is the CUDA version the host driver supports, major.minor ("" if
	// unknown). A cuda condition never holds with an unknown CUDA version:
	// the check fails closed, since the version is what keeps an image
	// built for a newer CUDA from starting (and failing later with "CUDA
	// error 35"), and the driver's libcuda answers it even without a GPU.
	CUDA string
	// CUDAUnknown says why CUDA is unknown, for messages ("" if known or
	// not said).
	CUDAUnknown string
	// Driver is the driver version, e.g. 580.159.04 ("" if unknown).
	Driver string
	// Devices are the selected devices; every requirement must hold for
	// each. With none, arch and brand conditions hold.
	Devices []DeviceFacts
}

// Result is the outcome of a successful evaluation.
type Result struct {
	// Notes lists conditions that were taken as true because the host value
	// is unknown or not a version (never cuda conditions).
	Notes []string
}

// Failure explains why one alternative did not hold.
type Failure struct {
	// Alternative is the alternative that was tried.
	Alternative Alternative
	// Condition is the first of its conditions that is false.
	Condition Condition
	// Host is the host value the condition was compared with.
	Host string
	// Device is the device the condition was false for (nil for cuda and
	// driver conditions).
	Device *DeviceFacts
}

// UnsatisfiedError reports a requirement that does not hold on this host.
// Its text has no phase prefix: callers that print NVIDIA's "requirement
// error: " wrap it (internal/phase).
type UnsatisfiedError struct {
	// Expr is the requirement (its Source is the text as given).
	Expr Expr
	// Failures has one entry per alternative, in order.
	Failures []Failure
	// Facts are the host values the requirement was checked against.
	Facts Facts
}

// NVIDIAMessage is libnvidia-container's text for the failure (after its
// "requirement error: " prefix): it quotes the first alternative and, when
// that starts with cuda>=, adds NVIDIA's advice.
func (e *UnsatisfiedError) NVIDIAMessage() string {
	first := ""
	if len(e.Expr.Alternatives) > 0 {
		first = e.Expr.Alternatives[0].String()
	}
	msg := "unsatisfied condition: " + first
	if strings.HasPrefix(first, "cuda>=") {
		msg += ", please update your driver to a newer version, or use an earlier cuda container"
	}
	return msg
}

// Advice says what the user can do.
func (e *UnsatisfiedError) Advice() string {
	const skip = "set NVIDIA_DISABLE_REQUIRE=true to skip this check"
	if len(e.Failures) == 0 {
		return skip
	}
	c := e.Failures[0].Condition
	switch {
	case c.Key == KeyCUDA && e.Failures[0].Host == "":
		return "make the driver's CUDA version known (nvidia-container-cli info shows why it is not: a missing libcuda, or nctk-driverprobe missing beside nctk), or " + skip
	case c.Key == KeyCUDA && (c.Op == OpGreater || c.Op == OpGreaterEqual || c.Op == OpEqual):
		return "update the host driver, use an image built for an older CUDA, or " + skip
	case c.Key == KeyDriver && (c.Op == OpGreater || c.Op == OpGreaterEqual || c.Op == OpEqual):
		return "update the host driver, use an image made for this driver, or " + skip
	case c.Key == KeyArch:
		return "run the container on a GPU the image supports, use an image built for this GPU, or " + skip
	}
	return "use an image whose requirements this host meets, or " + skip
}

func (e *UnsatisfiedError) Error() string {
	var b strings.Builder
	b.WriteString(e.NVIDIAMessage())
	if len(e.Failures) > 0 {
		// NVIDIA's text quotes the first alternative; say which of its
		// conditions failed and what the host has, without repeating it.
		f := e.Failures[0]
		b.WriteString(" (")
		if len(e.Expr.Alternatives) == 0 || f.Condition.String() != e.Expr.Alternatives[0].String() {
			b.WriteString(f.Condition.String())
			b.WriteString(" fails: ")
		}
		b.WriteString(explain(f, e.Facts))
		b.WriteString(")")
	}
	if len(e.Failures) > 1 {
		fmt.Fprintf(&b, "; also tried %d other alternatives, none holds: %s", len(e.Failures)-1, summarize(e.Failures[1:]))
	}
	b.WriteString("; host: ")
	b.WriteString(describeHost(e.Facts))
	b.WriteString("; ")
	b.WriteString(e.Advice())
	return b.String()
}

// maxListed bounds how many values of one group a message lists.
const maxListed = 8

// summarize groups failures by the key and operator of the condition that
// failed, so that the 16 brand alternatives of a CUDA image read as one
// line: `32 fail on brand= (unknown, grid, …; GPU 0 … is Nvidia), 2 fail
// on driver< (536, 551; the host driver is 580.159.04)`.
func summarize(fs []Failure) string {
	type group struct {
		key    string
		n      int
		values []string
		host   string
		seen   map[string]bool
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, f := range fs {
		k := string(f.Condition.Key) + string(f.Condition.Op)
		g := byKey[k]
		if g == nil {
			g = &group{key: k, seen: map[string]bool{}}
			switch f.Condition.Key {
			case KeyCUDA:
				g.host = "the host driver supports CUDA " + f.Host
				if f.Host == "" {
					g.host = "the host driver's CUDA version is unknown"
				}
			case KeyDriver:
				g.host = "the host driver is " + f.Host
			default:
				dev := "the GPU"
				if f.Device != nil {
					dev = f.Device.name()
				}
				g.host = fmt.Sprintf("%s has %s %s", dev, f.Condition.Key, f.Host)
			}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.n++
		if v := strings.ToLower(f.Condition.Value); !g.seen[v] {
			g.seen[v] = true
			g.values = append(g.values, f.Condition.Value)
		}
	}
	parts := make([]string, len(groups))
	for i, g := range groups {
		vals := g.values
		more := ""
		if len(vals) > maxListed {
			vals, more = vals[:maxListed], ", …"
		}
		verb := "fail"
		if g.n == 1 {
			verb = "fails"
		}
		parts[i] = fmt.Sprintf("%d %s on %s (%s%s; %s)", g.n, verb, g.key, strings.Join(vals, ", "), more, g.host)
	}
	return strings.Join(parts, ", ")
}

// describeHost lists the host values: "driver 580.159.04, CUDA 13.0, GPU 0
// (GPU-…) brand Nvidia arch 9.0" (brand and arch when known).
func describeHost(f Facts) string {
	parts := []string{"driver " + orUnknown(f.Driver), "CUDA " + orUnknown(f.CUDA)}
	for _, d := range f.Devices {
		// Brand and arch are read only when a requirement tests them
		// (they need NVML); unread, they are left out, not "unknown".
		s := d.name()
		if d.Brand != "" {
			s += " brand " + d.Brand
		}
		if d.Arch != "" {
			s += " arch " + d.Arch
		}
		parts = append(parts, s)
	}
	if len(f.Devices) == 0 {
		parts = append(parts, "no GPU selected")
	}
	return strings.Join(parts, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// opWords renders an operator for sentences.
func opWords(op Op) string {
	if op == OpEqual {
		return "=="
	}
	return string(op)
}

// explain says in words why a failure's condition is false.
func explain(f Failure, facts Facts) string {
	c := f.Condition
	switch c.Key {
	case KeyCUDA:
		if f.Host == "" {
			why := ""
			if facts.CUDAUnknown != "" {
				why = ": " + facts.CUDAUnknown
			}
			return fmt.Sprintf("the image needs CUDA %s %s, but the CUDA version of the host driver %s could not be determined%s",
				opWords(c.Op), c.Value, orUnknown(facts.Driver), why)
		}
		if !validVersion(numericPrefix(f.Host)) {
			return fmt.Sprintf("the image needs CUDA %s %s, but the host driver %s reports CUDA version %q, which is not a version",
				opWords(c.Op), c.Value, orUnknown(facts.Driver), f.Host)
		}
		return fmt.Sprintf("the image needs CUDA %s %s, but the host driver %s supports CUDA %s",
			opWords(c.Op), c.Value, orUnknown(facts.Driver), f.Host)
	case KeyDriver:
		return fmt.Sprintf("the image needs driver %s %s, but the host driver is %s", opWords(c.Op), c.Value, f.Host)
	case KeyArch:
		dev := "the GPU"
		if f.Device != nil {
			dev = f.Device.name()
		}
		return fmt.Sprintf("the image needs compute capability (arch) %s %s, but %s has %s", opWords(c.Op), c.Value, dev, f.Host)
	case KeyBrand:
		dev := "the GPU"
		if f.Device != nil {
			dev = f.Device.name()
		}
		if c.Op == OpNotEqual {
			return fmt.Sprintf("the image does not run on brand %s, and %s is %s", c.Value, dev, f.Host)
		}
		return fmt.Sprintf("the image needs brand %s, but %s is %s", c.Value, dev, f.Host)
	}
	return "false on this host"
}

// Check evaluates every requirement against the host facts and returns nil
// when all hold. Notes about unknown host values are logged with slog at
// debug level (a tool's stderr stays clean); use Evaluate to get them.
func Check(reqs []Expr, facts Facts) error {
	res, err := Evaluate(reqs, facts)
	for _, n := range res.Notes {
		slog.Debug("requirement check", "note", n)
	}
	return err
}

// Evaluate checks every requirement, as parsed by Parse, against the host
// facts. Each requirement must hold for every device in facts.Devices (or
// once with no device, in which case arch and brand conditions hold). A
// condition on a host value that is unknown ("" in facts) or not a version
// is taken as true and noted in the result, except a cuda condition, which
// an unknown or unparsable CUDA version never satisfies (see Facts.CUDA).
//
// The first requirement that does not hold yields an *UnsatisfiedError.
// Requirements are checked in order, and a requirement is checked device by
// device, so the error names the first device it fails for.
func Evaluate(reqs []Expr, facts Facts) (Result, error) {
	var res Result
	noted := map[string]bool{}
	note := func(n string) {
		if !noted[n] {
			noted[n] = true
			res.Notes = append(res.Notes, n)
		}
	}
	devices := facts.Devices
	if len(devices) == 0 {
		devices = []DeviceFacts{{}}
	}
	noDevice := len(facts.Devices) == 0
	for _, e := range reqs {
		for di := range devices {
			var dev *DeviceFacts
			if !noDevice {
				dev = &devices[di]
			}
			failures, ok := evalExpr(e, facts, dev, note)
			if !ok {
				return res, &UnsatisfiedError{Expr: e, Failures: failures, Facts: facts}
			}
		}
	}
	return res, nil
}

// evalExpr evaluates e for one device (nil: no device). It returns whether
// some alternative holds and, if none does, why each failed.
func evalExpr(e Expr, facts Facts, dev *DeviceFacts, note func(string)) ([]Failure, bool) {
	var failures []Failure
	for _, alt := range e.Alternatives {
		f, ok := evalAlternative(alt, facts, dev, note)
		if ok {
			return nil, true
		}
		failures = append(failures, f)
	}
	return failures, false
}

// evalAlternative evaluates all conditions of alt; on failure it reports
// the first false condition.
func evalAlternative(alt Alternative, facts Facts, dev *DeviceFacts, note func(string)) (Failure, bool) {
	for _, c := range alt {
		host, ok := evalCondition(c, facts, dev, note)
		if !ok {
			return Failure{Alternative: alt, Condition: c, Host: host, Device: dev}, false
		}
	}
	return Failure{}, true
}

// evalCondition evaluates one condition and returns the host value it was
// compared with.
func evalCondition(c Condition, facts Facts, dev *DeviceFacts, note func(string)) (string, bool) {
	var host string
	switch c.Key {
	case KeyCUDA:
		host = facts.CUDA
		if host == "" {
			return host, false // fails closed (see Facts.CUDA)
		}
	case KeyDriver:
		host = facts.Driver
		if host == "" {
			note(fmt.Sprintf("the host driver version is unknown: %s taken as true", c))
			return host, true
		}
	case KeyArch, KeyBrand:
		if dev == nil {
			return "", true
		}
		host = dev.Arch
		if c.Key == KeyBrand {
			host = dev.Brand
		}
		if host == "" {
			note(fmt.Sprintf("the %s of %s is unknown: %s taken as true", c.Key, dev.name(), c))
			return host, true
		}
	default:
		return "", false
	}
	if c.Key == KeyBrand {
		eq := strings.EqualFold(host, c.Value)
		return host, eq == (c.Op == OpEqual)
	}
	cmp, ok := CompareVersions(host, c.Value)
	if !ok {
		// A host value that is not a version (a driver such as
		// "580.65.06-open"?) is compared on its numeric prefix.
		cmp, ok = CompareVersions(numericPrefix(host), c.Value)
		if !ok {
			if c.Key == KeyCUDA {
				return host, false // fails closed (see Facts.CUDA)
			}
			note(fmt.Sprintf("the host %s value %q is not a version: %s taken as true", c.Key, host, c))
			return host, true
		}
	}
	switch c.Op {
	case OpEqual:
		return host, cmp == 0
	case OpNotEqual:
		return host, cmp != 0
	case OpLess:
		return host, cmp < 0
	case OpLessEqual:
		return host, cmp <= 0
	case OpGreater:
		return host, cmp > 0
	case OpGreaterEqual:
		return host, cmp >= 0
	}
	return host, false
}

// numericPrefix returns the leading digits-and-dots part of v without a
// trailing dot.
func numericPrefix(v string) string {
	i := 0
	for i < len(v) && (v[i] == '.' || (v[i] >= '0' && v[i] <= '9')) {
		i++
	}
	return strings.TrimRight(v[:i], ".")
}
