package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// hclogger gives raft (which logs through hclog) the controller's slog logger. Raft's
// chatty info messages (elections, heartbeats retried) stay info: they are the cluster's
// story an operator reads.
type hclogger struct {
	base *slog.Logger // the logger given, without name and arguments
	log  *slog.Logger // base with the name and the arguments
	name string
	args []any
}

func newHCLogger(l *slog.Logger) hclog.Logger { return &hclogger{base: l, log: l} }

// derive returns a logger named name with args.
func (h *hclogger) derive(name string, args []any) *hclogger {
	l := h.base
	if name != "" {
		l = l.With("raft", name)
	}
	return &hclogger{base: h.base, log: l.With(args...), name: name, args: args}
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hclogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	if !h.log.Enabled(context.Background(), slogLevel(level)) {
		return
	}
	for i, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 { // hclog.Fmt: a format and its operands
			if format, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(format, f[1:]...)
			}
		}
	}
	h.log.Log(context.Background(), slogLevel(level), msg, args...)
}

func (h *hclogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogger) enabled(l hclog.Level) bool {
	return h.log.Enabled(context.Background(), slogLevel(l))
}

func (h *hclogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogger) ImpliedArgs() []any { return h.args }

func (h *hclogger) With(args ...any) hclog.Logger {
	return h.derive(h.name, append(append([]any{}, h.args...), args...))
}

func (h *hclogger) Name() string { return h.name }

func (h *hclogger) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hclogger) ResetNamed(name string) hclog.Logger { return h.derive(name, h.args) }

// SetLevel does nothing: the slog handler decides what is logged.
func (h *hclogger) SetLevel(hclog.Level) {}

func (h *hclogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (h *hclogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.log.Handler(), slog.LevelInfo)
}

func (h *hclogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		h.log.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
