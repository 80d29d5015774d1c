// Package nvc holds what every nvidia-container-cli command shares: an
// argp-compatible option parser, the global options (--root, --ldcache,
// --debug, --load-kmods, --user, --no-pivot, --no-create-imex-channels),
// the glog-style debug log, the "nvidia-container-cli: <phase> error: …"
// error report, and the discovery options the global flags imply. The
// info and list commands (package containercli) and configure use it, so
// all of them accept the same global flags the same way.
package nvc

import (
	"fmt"
	"sort"
	"strings"
)

// ArgKind says whether an option takes an argument.
type ArgKind int

// Argument kinds, as in argp.
const (
	NoArg ArgKind = iota
	// RequiredArg: --name=V, --name V, -xV, -x V.
	RequiredArg
	// OptionalArg: only --name=V or -xV; a bare --name has none.
	OptionalArg
)

// Option describes one command-line option.
type Option struct {
	// Long is the long name without dashes ("" for none); Short the short
	// letter (0 for none).
	Long  string
	Short rune
	Arg   ArgKind
	// ArgName and Doc are shown by --help.
	ArgName string
	Doc     string
}

// Parsed is one option occurrence.
type Parsed struct {
	Opt *Option
	// Value is the argument; HasValue is false for NoArg options and bare
	// OptionalArg ones.
	Value    string
	HasValue bool
}

// Name returns the option's long name, or its short letter.
func (p Parsed) Name() string {
	if p.Opt.Long != "" {
		return p.Opt.Long
	}
	return string(p.Opt.Short)
}

// UsageError is a command-line error; argp reports these with a "Try …"
// line and exit status 64.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Parse parses args (without the program name) against opts, argp style:
// long options may be abbreviated to any unique prefix, short options may
// be grouped (-kn), and "--" ends the options. If inOrder is true parsing
// stops at the first non-option argument (global options before a
// command); otherwise options and operands may be mixed, GNU style. It
// returns the options in the order given and the remaining operands.
func Parse(opts []Option, args []string, inOrder bool) ([]Parsed, []string, error) {
	var out []Parsed
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return out, append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := findLong(opts, name)
			if err != nil {
				return nil, nil, err
			}
			p := Parsed{Opt: o}
			switch o.Arg {
			case NoArg:
				if hasVal {
					return nil, nil, &UsageError{fmt.Sprintf("option '--%s' doesn't allow an argument", o.Long)}
				}
			case RequiredArg:
				if !hasVal {
					if i+1 >= len(args) {
						return nil, nil, &UsageError{fmt.Sprintf("option '--%s' requires an argument", o.Long)}
					}
					i++
					val = args[i]
				}
				p.Value, p.HasValue = val, true
			case OptionalArg:
				p.Value, p.HasValue = val, hasVal
			}
			out = append(out, p)
		case strings.HasPrefix(a, "-") && a != "-":
			group := []rune(a[1:])
		letters:
			for j := 0; j < len(group); j++ {
				o := findShort(opts, group[j])
				if o == nil {
					return nil, nil, &UsageError{fmt.Sprintf("invalid option -- '%c'", group[j])}
				}
				p := Parsed{Opt: o}
				rest := string(group[j+1:])
				switch o.Arg {
				case NoArg:
					out = append(out, p)
					continue
				case RequiredArg:
					if rest == "" {
						if i+1 >= len(args) {
							return nil, nil, &UsageError{fmt.Sprintf("option requires an argument -- '%c'", group[j])}
						}
						i++
						rest = args[i]
					}
					p.Value, p.HasValue = rest, true
				case OptionalArg:
					p.Value, p.HasValue = rest, rest != ""
				}
				out = append(out, p)
				break letters
			}
		default:
			if inOrder {
				return out, append(operands, args[i:]...), nil
			}
			operands = append(operands, a)
		}
	}
	return out, operands, nil
}

// findLong finds a long option by exact name or unique prefix.
func findLong(opts []Option, name string) (*Option, error) {
	var matches []*Option
	for i := range opts {
		o := &opts[i]
		if o.Long == "" {
			continue
		}
		if o.Long == name {
			return o, nil
		}
		if name != "" && strings.HasPrefix(o.Long, name) {
			matches = append(matches, o)
		}
	}
	switch len(matches) {
	case 0:
		return nil, &UsageError{fmt.Sprintf("unrecognized option '--%s'", name)}
	case 1:
		return matches[0], nil
	}
	var names []string
	for _, m := range matches {
		names = append(names, "'--"+m.Long+"'")
	}
	sort.Strings(names)
	return nil, &UsageError{fmt.Sprintf("option '--%s' is ambiguous; possibilities: %s", name, strings.Join(names, " "))}
}

func findShort(opts []Option, c rune) *Option {
	for i := range opts {
		if opts[i].Short == c && c != 0 {
			return &opts[i]
		}
	}
	return nil
}

// Help renders an argp-style option list.
func Help(opts []Option) string {
	var b strings.Builder
	for _, o := range opts {
		var left string
		switch {
		case o.Short != 0 && o.Long != "":
			left = fmt.Sprintf("  -%c, --%s", o.Short, o.Long)
		case o.Short != 0:
			left = fmt.Sprintf("  -%c", o.Short)
		default:
			left = fmt.Sprintf("      --%s", o.Long)
		}
		switch o.Arg {
		case RequiredArg:
			left += "=" + o.ArgName
		case OptionalArg:
			left += "[=" + o.ArgName + "]"
		}
		if len(left) < 29 {
			left += strings.Repeat(" ", 29-len(left))
		} else {
			left += "\n" + strings.Repeat(" ", 29)
		}
		b.WriteString(left + o.Doc + "\n")
	}
	return b.String()
}
