package ldcache

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ConfLine is one line of an ld.so.conf file that names something: a
// library directory, or include patterns.
type ConfLine struct {
	// Dir is a directory as ldconfig takes it: the line from its first
	// non-space character, trailing slashes removed (trailing spaces stay,
	// as they do for ldconfig).
	Dir string
	// Include holds the patterns of an "include" line, each as written.
	Include []string
	// Line is the line's number, from 1.
	Line int
}

// ErrConfUnsupported: an ld.so.conf line asks for something ParseConf's
// callers do not model (a "hwcap" line, a directory with a library type
// "=…", or one that is not an absolute, clean path); ldconfig itself must
// read the file.
var ErrConfUnsupported = errors.New("ld.so.conf line not modelled")

// ParseConf reads an ld.so.conf file as glibc's ldconfig reads it: a line
// ends at "\n", a "#" starts a comment, leading white space is skipped,
// blank lines are ignored; "include" followed by a blank starts a list of
// glob patterns separated by spaces and tabs; any other line is a
// directory. A line ParseConf's callers cannot reproduce exactly gives an
// error wrapping ErrConfUnsupported, naming the line.
func ParseConf(data []byte) ([]ConfLine, error) {
	var out []ConfLine
	for n, line := 1, string(data); line != ""; n++ {
		var rest string
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line, rest = line[:i], line[i+1:]
		} else {
			rest = ""
		}
		l, err := parseConfLine(line, n)
		if err != nil {
			return nil, err
		}
		if l.Dir != "" || l.Include != nil {
			out = append(out, l)
		}
		line = rest
	}
	return out, nil
}

func parseConfLine(line string, n int) (ConfLine, error) {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	// glibc's getline stops at a NUL in the C string.
	if i := strings.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	line = strings.TrimLeft(line, " \t\n\v\f\r")
	if line == "" {
		return ConfLine{}, nil
	}
	if len(line) > 7 && strings.HasPrefix(line, "include") && (line[7] == ' ' || line[7] == '\t') {
		pats := strings.FieldsFunc(line[8:], func(r rune) bool { return r == ' ' || r == '\t' })
		if pats == nil {
			pats = []string{}
		}
		return ConfLine{Include: pats, Line: n}, nil
	}
	if len(line) > 5 && strings.EqualFold(line[:5], "hwcap") && (line[5] == ' ' || line[5] == '\t') {
		return ConfLine{}, fmt.Errorf("line %d: %q: %w", n, line, ErrConfUnsupported)
	}
	dir := line
	for len(dir) > 1 && dir[len(dir)-1] == '/' {
		dir = dir[:len(dir)-1]
	}
	if strings.ContainsRune(dir, '=') || !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" {
		return ConfLine{}, fmt.Errorf("line %d: directory %q: %w", n, line, ErrConfUnsupported)
	}
	return ConfLine{Dir: dir, Line: n}, nil
}
