package main

import (
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
)

// The logs of every command that logs: one default level (info) and format (text), the
// environment's ZMESH_LOG_LEVEL and ZMESH_LOG_FORMAT over them, and the flags over those.
// Under journald the lines carry no time of their own: the journal stamps each.
const (
	envLogLevel  = "ZMESH_LOG_LEVEL"
	envLogFormat = "ZMESH_LOG_FORMAT"
)

// logFlags are a command's --log-level and --log-format.
type logFlags struct{ level, format string }

func (lf *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&lf.level, "log-level", "", "log level: debug, info, warn, error (default info, or $"+envLogLevel+")")
	fs.StringVar(&lf.format, "log-format", "", "log format: text or json (default text, or $"+envLogFormat+")")
}

// newLogger returns the logger lf and the environment ask for, writing to w.
func newLogger(w io.Writer, lf logFlags, lookupEnv env) (*slog.Logger, error) {
	level, levelFrom := setting(lf.level, "--log-level", envLogLevel, "info", lookupEnv)
	format, formatFrom := setting(lf.format, "--log-format", envLogFormat, "text", lookupEnv)
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("%s %q is not allowed; allowed: debug, info, warn, error", levelFrom, level)
	}
	opts := &slog.HandlerOptions{Level: l}
	if toJournal(w, lookupEnv) {
		opts.ReplaceAttr = dropTime
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("%s %q is not allowed; allowed: text, json", formatFrom, format)
}

// setting returns the flag's value, else the environment's, else def, and where it came
// from, for errors.
func setting(flagValue, flag, envName, def string, lookupEnv env) (value, from string) {
	if flagValue != "" {
		return strings.ToLower(flagValue), flag
	}
	if v, ok := lookupEnv(envName); ok && v != "" {
		return strings.ToLower(v), "$" + envName
	}
	return def, flag
}

// toJournal reports whether w is standard error and systemd connected it to the journal:
// JOURNAL_STREAM names its device and inode.
func toJournal(w io.Writer, lookupEnv env) bool {
	stream, ok := lookupEnv("JOURNAL_STREAM")
	if !ok || w != io.Writer(os.Stderr) {
		return false
	}
	dev, ino, ok := strings.Cut(stream, ":")
	if !ok {
		return false
	}
	var st syscall.Stat_t
	if syscall.Fstat(int(os.Stderr.Fd()), &st) != nil {
		return false
	}
	return dev == strconv.FormatUint(st.Dev, 10) && ino == strconv.FormatUint(st.Ino, 10)
}

// dropTime removes the time from a log line.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}
