package ctk

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/nctk/nctk/internal/app"
)

// flagSet is a flag.FlagSet with aliases, environment twins, "was it set"
// tracking and a help text, accepting both -name and --name.
type flagSet struct {
	fs    *flag.FlagSet
	specs []*flagSpec
}

type flagSpec struct {
	names []string // first is canonical
	env   []string
	arg   string // value placeholder; "" for booleans
	def   string
	usage string
	set   bool // given on the command line or by an environment twin
	// hidden leaves the flag out of Usage (the global flags a command
	// also accepts after its name).
	hidden bool
}

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{fs: fs}
}

// trackedValue records that its flag was set.
type trackedValue struct {
	flag.Value
	spec *flagSpec
}

func (v trackedValue) Set(s string) error {
	v.spec.set = true
	return v.Value.Set(s)
}

func (v trackedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (f *flagSet) add(v flag.Value, spec *flagSpec) {
	f.specs = append(f.specs, spec)
	for _, n := range spec.names {
		f.fs.Var(trackedValue{Value: v, spec: spec}, n, spec.usage)
	}
}

// Bool defines a boolean flag with aliases and environment twins.
func (f *flagSet) Bool(p *bool, names []string, env []string, usage string) {
	f.add(boolValue{p}, &flagSpec{names: names, env: env, usage: usage, def: strconv.FormatBool(*p)})
}

// String defines a string flag; *p holds the default.
func (f *flagSet) String(p *string, names []string, env []string, arg, usage string) {
	f.add(stringValue{p}, &flagSpec{names: names, env: env, arg: arg, usage: usage, def: *p})
}

// Func defines a repeatable flag handled by fn.
func (f *flagSet) Func(names []string, arg, usage string, fn func(string) error) {
	f.add(funcValue(fn), &flagSpec{names: names, arg: arg, usage: usage})
}

// Defined reports whether a flag named name is defined.
func (f *flagSet) Defined(name string) bool { return f.fs.Lookup(name) != nil }

// IsSet reports whether the flag named name was given.
func (f *flagSet) IsSet(name string) bool {
	for _, s := range f.specs {
		for _, n := range s.names {
			if n == name {
				return s.set
			}
		}
	}
	return false
}

// Parse applies the environment twins, then the arguments, and returns
// the arguments after the flags.
func (f *flagSet) Parse(e *app.Env, args []string) ([]string, error) {
	for _, s := range f.specs {
		for _, env := range s.env {
			v, ok := e.LookupEnv(env)
			if !ok || v == "" {
				continue
			}
			if err := f.fs.Set(s.names[0], v); err != nil {
				return nil, fmt.Errorf("%s=%q: %w", env, v, err)
			}
			break
		}
	}
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, flag.ErrHelp
		}
		return nil, err
	}
	return f.fs.Args(), nil
}

// Usage writes the flags' help.
func (f *flagSet) Usage(w io.Writer) {
	specs := append([]*flagSpec{}, f.specs...)
	sort.SliceStable(specs, func(i, j int) bool { return specs[i].names[0] < specs[j].names[0] })
	for _, s := range specs {
		if s.hidden {
			continue
		}
		names := make([]string, len(s.names))
		for i, n := range s.names {
			if len(n) == 1 {
				names[i] = "-" + n
			} else {
				names[i] = "--" + n
			}
		}
		left := strings.Join(names, ", ")
		if s.arg != "" {
			left += " " + s.arg
		}
		line := fmt.Sprintf("  %-36s %s", left, s.usage)
		if s.def != "" && s.def != "false" {
			line += fmt.Sprintf(" (default %q)", s.def)
		}
		if len(s.env) > 0 {
			line += " [$" + strings.Join(s.env, ", $") + "]"
		}
		fmt.Fprintln(w, line)
	}
}

type boolValue struct{ p *bool }

func (b boolValue) String() string {
	if b.p == nil {
		return "false"
	}
	return strconv.FormatBool(*b.p)
}

func (b boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean", s)
	}
	*b.p = v
	return nil
}

func (b boolValue) IsBoolFlag() bool { return true }

type stringValue struct{ p *string }

func (s stringValue) String() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

func (s stringValue) Set(v string) error { *s.p = v; return nil }

type funcValue func(string) error

func (f funcValue) String() string     { return "" }
func (f funcValue) Set(s string) error { return f(s) }
