package nvc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// GlogHandler writes records in the format of NVIDIA's debug log:
//
//	I1104 16:00:48.626793 212076 discover.go:372] message key=value …
//
// level letter (I, W, E), month and day, UTC time with microseconds, the
// process id (NVIDIA prints the thread id), source file:line.
type GlogHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	attrs string
	group string
}

// NewGlogHandler returns a handler writing to w.
func NewGlogHandler(w io.Writer) *GlogHandler { return &GlogHandler{mu: &sync.Mutex{}, w: w} }

// Enabled accepts every level: the debug log is for debugging.
func (h *GlogHandler) Enabled(context.Context, slog.Level) bool { return true }

// Handle writes one line.
func (h *GlogHandler) Handle(_ context.Context, r slog.Record) error {
	level := 'I'
	switch {
	case r.Level >= slog.LevelError:
		level = 'E'
	case r.Level >= slog.LevelWarn:
		level = 'W'
	}
	src := "???:0"
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		src = fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
	}
	t := r.Time.UTC()
	if r.Time.IsZero() {
		t = time.Now().UTC()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%c%s %d %s] %s%s", level, t.Format("0102 15:04:05.000000"), os.Getpid(), src, r.Message, h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(formatAttr(h.group, a))
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func formatAttr(group string, a slog.Attr) string {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return ""
	}
	key := a.Key
	if group != "" {
		key = group + "." + key
	}
	if a.Value.Kind() == slog.KindGroup {
		var s string
		for _, ga := range a.Value.Group() {
			s += formatAttr(key, ga)
		}
		return s
	}
	v := a.Value.String()
	if strings.ContainsAny(v, " \t\"=") || v == "" {
		v = fmt.Sprintf("%q", v)
	}
	return " " + key + "=" + v
}

// WithAttrs returns a handler that adds attrs to every line.
func (h *GlogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	for _, a := range attrs {
		h2.attrs += formatAttr(h.group, a)
	}
	return &h2
}

// WithGroup returns a handler that qualifies later keys with name.
func (h *GlogHandler) WithGroup(name string) slog.Handler {
	h2 := *h
	if h2.group != "" {
		name = h2.group + "." + name
	}
	h2.group = name
	return &h2
}
