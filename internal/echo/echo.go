// Package echo renders values that come from a container image or a user
// (environment variables, device ids, paths in specs) for error and log
// messages: control characters are escaped, so a value cannot forge a
// second line in a log, and a long value is cut to a readable length with
// an ellipsis and a note of its full length, so a 40,000-character
// variable gives a short message.
package echo

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxValue is how many bytes of a value Quote and Text show.
const MaxValue = 128

// MaxMessage is how many bytes of an error message Error shows: far below
// a pipe's buffer, so that writing one message to a stderr pipe nobody
// drains does not block.
const MaxMessage = 4 << 10

// Quote returns s Go-quoted (as %q formats it), cut to MaxValue bytes:
// `"0,1,2…"… (40000 bytes)` for a long value, exactly %q's output for a
// short one.
func Quote(s string) string {
	head, cut := prefix(s, MaxValue)
	q := strconv.Quote(head)
	if cut {
		q += "… (" + strconv.Itoa(len(s)) + " bytes)"
	}
	return q
}

// Text returns s unquoted with its control characters (and invalid UTF-8)
// escaped as Go escapes them ("\n", "\x00", "\u2028"), cut to MaxValue
// bytes with "… (N bytes)" appended when it is longer.
func Text(s string) string {
	head, cut := prefix(s, MaxValue)
	t := escape(head)
	if cut {
		t += "… (" + strconv.Itoa(len(s)) + " bytes)"
	}
	return t
}

// Line returns a whole message as one line of at most limit bytes (plus
// the note): control characters escaped as in Text, cut with
// "… (N bytes)". It is the last guard before a message is written where a
// reader expects one line per message (stderr, a log file).
func Line(msg string, limit int) string {
	head, cut := prefix(msg, limit)
	t := escape(head)
	if cut {
		t += "… (" + strconv.Itoa(len(msg)) + " bytes)"
	}
	return t
}

// Error returns err's message as one line of at most MaxMessage bytes (see
// Line), for the edge where a command prints its error.
func Error(err error) string { return Line(err.Error(), MaxMessage) }

// prefix returns s cut to at most n bytes at a rune boundary, and whether
// it was cut.
func prefix(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	i := max(n, 0)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}

// escape escapes the runes of s that are not printable or are invalid
// UTF-8; everything else (including spaces and backslashes) is kept.
func escape(s string) string {
	clean := true
	for i, r := range s {
		if needsEscape(s, i, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i, r := range s {
		if !needsEscape(s, i, r) {
			b.WriteRune(r)
			continue
		}
		if r == utf8.RuneError {
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
			continue
		}
		q := strconv.QuoteRune(r) // '\n', '\x00', '\u2028'
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// needsEscape: r (at byte i of s) is a control or other non-printable
// rune, or a byte of invalid UTF-8.
func needsEscape(s string, i int, r rune) bool {
	if r == utf8.RuneError {
		_, size := utf8.DecodeRuneInString(s[i:])
		return size == 1
	}
	return r != ' ' && !unicode.IsPrint(r)
}

// Wrap returns err with its message made one line as Line does (control
// characters escaped, at most MaxMessage bytes), still unwrapping to err:
// for the errors of libraries that repeat a value in their messages
// unescaped (the CDI library's name parser, for one).
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return &wrapped{err}
}

type wrapped struct{ err error }

func (w *wrapped) Error() string { return Line(w.err.Error(), MaxMessage) }
func (w *wrapped) Unwrap() error { return w.err }
