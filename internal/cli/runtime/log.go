package runtime

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nctk/nctk/internal/config"
)

// maxLogBytes bounds what one run writes to a log file; records past it
// are dropped (each record is whole or absent).
const maxLogBytes = 1 << 20

// lazyFile is an append-only log file opened on the first write, so a
// command that logs nothing creates no file. It writes at most
// maxLogBytes.
type lazyFile struct {
	path    string
	mode    os.FileMode
	once    sync.Once
	f       *os.File
	err     error
	written int
}

func (l *lazyFile) Write(p []byte) (int, error) {
	l.once.Do(func() {
		l.f, l.err = os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, l.mode)
	})
	if l.err != nil {
		return 0, l.err
	}
	if l.written+len(p) > maxLogBytes {
		return len(p), nil
	}
	l.written += len(p)
	return l.f.Write(p)
}

func (l *lazyFile) Close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// runcLogOptions renders records as runc (logrus) does, which is what
// containerd's shim reads back from the --log file: a lower-case level and
// an RFC 3339 time.
func runcLogOptions(level slog.Leveler) *slog.HandlerOptions {
	return &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.LevelKey:
				if lv, ok := a.Value.Any().(slog.Level); ok {
					return slog.String(slog.LevelKey, logrusLevel(lv))
				}
			case slog.TimeKey:
				if t, ok := a.Value.Any().(time.Time); ok {
					return slog.String(slog.TimeKey, t.Format(time.RFC3339Nano))
				}
			}
			return a
		},
	}
}

func logrusLevel(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warning"
	}
	return "error"
}

// logger is the runtime's logging: the engine's --log file (warnings and
// errors; everything with --debug) in the --log-format it asked for, and
// the debug log file from config.toml.
type logger struct {
	*slog.Logger
	closers []io.Closer
}

func newLogger(inv *invocation, cfg *config.Config) *logger {
	l := &logger{}
	var hs []slog.Handler
	if inv.Log != "" {
		f := &lazyFile{path: inv.Log, mode: 0o644}
		l.closers = append(l.closers, f)
		lv := slog.LevelWarn
		if inv.Debug {
			lv = slog.LevelDebug
		}
		if strings.EqualFold(inv.LogFormat, "json") {
			hs = append(hs, slog.NewJSONHandler(f, runcLogOptions(lv)))
		} else {
			hs = append(hs, slog.NewTextHandler(f, runcLogOptions(lv)))
		}
	}
	if cfg != nil && cfg.Runtime.Debug != "" && cfg.Runtime.Debug != os.DevNull {
		f := &lazyFile{path: cfg.Runtime.Debug, mode: 0o600}
		l.closers = append(l.closers, f)
		lv, _ := cfg.SlogLevel()
		if inv.Debug {
			lv = slog.LevelDebug
		}
		hs = append(hs, slog.NewTextHandler(f, runcLogOptions(lv)).WithAttrs([]slog.Attr{slog.Int("pid", os.Getpid())}))
	}
	l.Logger = slog.New(slog.NewMultiHandler(hs...))
	return l
}

// enabled reports whether a record at level would be written anywhere.
func (l *logger) enabled(level slog.Level) bool {
	return l.Logger.Enabled(context.Background(), level)
}

func (l *logger) close() {
	for _, c := range l.closers {
		c.Close()
	}
}
