// Package requirements implements NVIDIA's requirement language, the value
// of NVIDIA_REQUIRE_* variables and of nvidia-container-cli --require.
//
// An expression is a list of space-separated alternatives, OR'ed; each
// alternative is a comma-separated list of conditions, AND'ed; a condition is
// `key OP value` with no spaces, for example
//
//	cuda>=12.1 brand=tesla,driver>=470,driver<471
//
// meaning "CUDA >= 12.1, or a Tesla GPU with a 470.x driver". Keys are cuda,
// driver, arch and brand (case-insensitive); operators are = != < <= > >=;
// brand takes only = and !=. Versions are compared numerically, component by
// component, as libnvidia-container does.
//
// Unlike NVIDIA's CLI, an unsatisfied requirement is reported with the
// condition that actually failed and the host's values, next to NVIDIA's own
// message text (which scripts grep for).
package requirements

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nctk/nctk/internal/echo"
)

// Key is a requirement property.
type Key string

// The properties a condition can test.
const (
	// KeyCUDA is the CUDA version the host driver supports (major.minor).
	KeyCUDA Key = "cuda"
	// KeyDriver is the driver (NVRM) version, e.g. 580.159.04.
	KeyDriver Key = "driver"
	// KeyArch is a device's compute capability, major.minor.
	KeyArch Key = "arch"
	// KeyBrand is a device's brand (Tesla, GeForce, Nvidia, …).
	KeyBrand Key = "brand"
)

// Op is a comparison operator.
type Op string

// The operators of the language.
const (
	OpEqual        Op = "="
	OpNotEqual     Op = "!="
	OpLess         Op = "<"
	OpLessEqual    Op = "<="
	OpGreater      Op = ">"
	OpGreaterEqual Op = ">="
)

// ops lists the operators of the language.
func ops() []Op {
	return []Op{OpEqual, OpNotEqual, OpLess, OpLessEqual, OpGreater, OpGreaterEqual}
}

// What syntax errors say the language accepts.
const (
	wantOps  = "want = != < <= > >="
	wantKeys = "want cuda, driver, arch or brand"
)

// Condition is one `key OP value` test.
type Condition struct {
	Key   Key
	Op    Op
	Value string
}

// String renders the condition in the language's syntax (key lower-cased).
func (c Condition) String() string { return string(c.Key) + string(c.Op) + c.Value }

// Alternative is a list of conditions that must all hold.
type Alternative []Condition

// String renders the alternative as a comma-separated list.
func (a Alternative) String() string {
	parts := make([]string, len(a))
	for i, c := range a {
		parts[i] = c.String()
	}
	return strings.Join(parts, ",")
}

// Expr is a parsed requirement: it holds when any alternative holds.
type Expr struct {
	// Source is the text the expression was parsed from.
	Source       string
	Alternatives []Alternative
}

// String renders the expression in canonical form: alternatives separated by
// one space, keys lower-cased.
func (e Expr) String() string {
	parts := make([]string, len(e.Alternatives))
	for i, a := range e.Alternatives {
		parts[i] = a.String()
	}
	return strings.Join(parts, " ")
}

// SyntaxError reports an expression that cannot be parsed. Its text has no
// phase prefix: callers that print NVIDIA's "requirement error: " wrap it
// (internal/phase).
type SyntaxError struct {
	// Input is the whole expression.
	Input string
	// Item is the part that is wrong (a condition or alternative), if any.
	Item string
	// Reason says what is wrong with it.
	Reason string
}

// Error quotes Input and Item with echo.Quote (escaped, a long one cut).
func (e *SyntaxError) Error() string {
	if e.Item != "" {
		return fmt.Sprintf("invalid expression %s: %s: %s", echo.Quote(e.Input), echo.Quote(e.Item), e.Reason)
	}
	return fmt.Sprintf("invalid expression %s: %s", echo.Quote(e.Input), e.Reason)
}

// isOpChar reports whether b can be part of an operator.
func isOpChar(b byte) bool { return b == '<' || b == '>' || b == '=' || b == '!' }

// isSpace reports whether b separates alternatives.
func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\v' || b == '\f'
}

// Parse parses a requirement expression. Runs of whitespace separate
// alternatives; leading and trailing whitespace is ignored. An empty
// expression, an empty condition ("a,,b"), an unknown key or operator, a
// version that is not digits and dots, or a brand compared with an ordering
// operator is an error of type *SyntaxError.
func Parse(expr string) (Expr, error) {
	e := Expr{Source: expr}
	fields := strings.FieldsFunc(expr, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
	if len(fields) == 0 {
		return Expr{}, &SyntaxError{Input: expr, Reason: "empty expression"}
	}
	for _, field := range fields {
		var alt Alternative
		for item := range strings.SplitSeq(field, ",") {
			c, err := parseCondition(item)
			if err != nil {
				err.Input = expr
				if err.Item == "" && item == "" {
					err.Item = field
				}
				return Expr{}, err
			}
			alt = append(alt, c)
		}
		e.Alternatives = append(e.Alternatives, alt)
	}
	return e, nil
}

// parseCondition parses `key OP value`. The operator is the maximal run of
// <>=! characters after the key, and must be one of the six operators.
func parseCondition(s string) (Condition, *SyntaxError) {
	if s == "" {
		return Condition{}, &SyntaxError{Reason: "empty condition (two commas in a row, or a comma at the start or end)"}
	}
	i := 0
	for i < len(s) && !isOpChar(s[i]) {
		i++
	}
	if i == len(s) {
		return Condition{}, &SyntaxError{Item: s, Reason: "no operator (want key OP value, OP one of = != < <= > >=)"}
	}
	j := i
	for j < len(s) && isOpChar(s[j]) {
		j++
	}
	key, op, value := strings.ToLower(s[:i]), Op(s[i:j]), s[j:]
	if key == "" {
		return Condition{}, &SyntaxError{Item: s, Reason: "missing key (" + wantKeys + ")"}
	}
	if !slices.Contains(ops(), op) {
		return Condition{}, &SyntaxError{Item: s, Reason: fmt.Sprintf("unknown operator %s (%s)", echo.Quote(string(op)), wantOps)}
	}
	if value == "" {
		return Condition{}, &SyntaxError{Item: s, Reason: "missing value"}
	}
	c := Condition{Key: Key(key), Op: op, Value: value}
	switch c.Key {
	case KeyCUDA, KeyDriver, KeyArch:
		if !validVersion(value) {
			return Condition{}, &SyntaxError{Item: s, Reason: fmt.Sprintf("%s version %s must be numbers separated by dots", key, echo.Quote(value))}
		}
	case KeyBrand:
		if op != OpEqual && op != OpNotEqual {
			return Condition{}, &SyntaxError{Item: s, Reason: fmt.Sprintf("brand takes only = and !=, not %s", op)}
		}
	default:
		return Condition{}, &SyntaxError{Item: s, Reason: fmt.Sprintf("unknown key %s (%s)", echo.Quote(s[:i]), wantKeys)}
	}
	return c, nil
}

// validVersion reports whether v is digits separated by single dots.
func validVersion(v string) bool {
	if v == "" || v[0] == '.' || v[len(v)-1] == '.' {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] >= '0' && v[i] <= '9':
		case v[i] == '.' && v[i-1] != '.':
		default:
			return false
		}
	}
	return true
}

// CompareVersions compares two versions made of digits and dots the way
// libnvidia-container does: numerically, component by component, missing
// components counting as zero (so "11" equals "11.0" and "12.4" is less
// than "12.4.1"). Components may be arbitrarily long. It returns -1, 0 or
// +1, and ok=false if either side is not a valid version.
func CompareVersions(a, b string) (cmp int, ok bool) {
	if !validVersion(a) || !validVersion(b) {
		return 0, false
	}
	for a != "" || b != "" {
		var x, y string
		x, a = nextComponent(a)
		y, b = nextComponent(b)
		if c := compareNumbers(x, y); c != 0 {
			return c, true
		}
	}
	return 0, true
}

// nextComponent splits off the first dot-separated component of v ("" when
// v is exhausted, which compares as zero).
func nextComponent(v string) (string, string) {
	if v == "" {
		return "", ""
	}
	if i := strings.IndexByte(v, '.'); i >= 0 {
		return v[:i], v[i+1:]
	}
	return v, ""
}

// compareNumbers compares two decimal digit strings of any length.
func compareNumbers(x, y string) int {
	x = strings.TrimLeft(x, "0")
	y = strings.TrimLeft(y, "0")
	if len(x) != len(y) {
		if len(x) < len(y) {
			return -1
		}
		return 1
	}
	return strings.Compare(x, y)
}
