package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/zmesh/zmesh/config"
)

// The logs of every command that logs: one default level (info) and format (text), a
// daemon's file (its log section) over them, the environment's ZMESH_LOG_LEVEL and
// ZMESH_LOG_FORMAT over that, and the flags over all.
// Under journald the lines carry no time of their own: the journal stamps each.
const (
	envLogLevel  = "ZMESH_LOG_LEVEL"
	envLogFormat = "ZMESH_LOG_FORMAT"
)

// logFlags are a command's --log-level and --log-format.
type logFlags struct{ level, format string }

func (lf *logFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&lf.level, "log-level", "", "log level: debug, info, warn, error (default info, or $"+envLogLevel+", or log.level of a daemon's file)")
	fs.StringVar(&lf.format, "log-format", "", "log format: text or json (default text, or $"+envLogFormat+", or log.format of a daemon's file)")
}

// logSetup is what the flags and the environment say of the logs, checked: a level or format
// they fix (levelFrom, formatFrom name the flag or variable), or none, which leaves the
// choice to a daemon's configuration file (log section), else to the defaults.
type logSetup struct {
	w                     io.Writer
	journal               bool
	level                 slog.Level
	levelFrom, formatFrom string // "" when neither the flag nor the environment says
	format                string
}

// newLogSetup checks the flags' and the environment's level and format; a value that is not
// allowed is a usage error naming where it came from.
func newLogSetup(w io.Writer, lf logFlags, lookupEnv env) (*logSetup, error) {
	s := &logSetup{w: w, journal: toJournal(w, lookupEnv)}
	if level, from := setting(lf.level, "--log-level", envLogLevel, lookupEnv); from != "" {
		if err := s.level.UnmarshalText([]byte(level)); err != nil {
			return nil, usagef("%s %q is not allowed; allowed: %s", from, level, strings.Join(config.LogLevels(), ", "))
		}
		s.levelFrom = from
	}
	if format, from := setting(lf.format, "--log-format", envLogFormat, lookupEnv); from != "" {
		if !slices.Contains(config.LogFormats(), format) {
			return nil, usagef("%s %q is not allowed; allowed: %s", from, format, strings.Join(config.LogFormats(), ", "))
		}
		s.format, s.formatFrom = format, from
	}
	return s, nil
}

// loadDaemonFile loads a daemon's configuration file and makes the daemon's logger, from the
// file's log section when the file loads (the default otherwise, to report why it did not);
// the file's warnings are logged as kind's.
func loadDaemonFile[C any](setup *logSetup, kind, file string, lookupEnv env,
	load func(string, func(string) (string, bool)) (*C, []config.Diagnostic, error), logOf func(*C) config.Log) (*C, *daemonLog, error) {
	cfg, warnings, err := load(file, lookupEnv)
	fileLog := defaultLog()
	if cfg != nil {
		fileLog = logOf(cfg)
	}
	dlog := setup.logger(fileLog)
	logWarnings(dlog.Logger, kind, file, warnings)
	return cfg, dlog, err
}

// defaultLog is the log section of a file that has none, and of the commands without a file.
func defaultLog() config.Log {
	return config.Log{Level: config.DefaultLogLevel, Format: config.DefaultLogFormat}
}

// logger returns the logger of a file whose log section is file: the flags and the
// environment over it. Its level can change in place (daemonLog.reload).
func (s *logSetup) logger(file config.Log) *daemonLog {
	d := &daemonLog{level: new(slog.LevelVar), levelFixedBy: s.levelFrom}
	if s.levelFrom != "" {
		d.level.Set(s.level)
	} else {
		d.level.Set(parseLevel(file.Level))
	}
	format := file.Format
	if s.formatFrom != "" {
		format = s.format
	}
	opts := &slog.HandlerOptions{Level: d.level}
	if s.journal {
		opts.ReplaceAttr = dropTime
	}
	if format == "json" {
		d.Logger = slog.New(slog.NewJSONHandler(s.w, opts))
	} else {
		d.Logger = slog.New(slog.NewTextHandler(s.w, opts))
	}
	return d
}

// newLogger returns the logger lf and the environment ask for, writing to w, for the
// commands without a configuration file.
func newLogger(w io.Writer, lf logFlags, lookupEnv env) (*slog.Logger, error) {
	s, err := newLogSetup(w, lf, lookupEnv)
	if err != nil {
		return nil, err
	}
	return s.logger(defaultLog()).Logger, nil
}

// daemonLog is a daemon's logger and its level, which a reload changes in place unless the
// flag or the environment fixes it (levelFixedBy names which).
type daemonLog struct {
	*slog.Logger
	level        *slog.LevelVar
	levelFixedBy string
}

// reload applies the level of a reloaded file's log section, or, when it differs from the
// level in effect, says why it does not: a flag or the environment fixes it. It reports
// whether the level changed.
func (d *daemonLog) reload(file string, new config.Log) bool {
	want := parseLevel(new.Level)
	if d.levelFixedBy != "" {
		if want != d.level.Level() {
			d.Warn("log.level of "+file+" differs from the level in effect, which "+d.levelFixedBy+" fixes: unchanged",
				"fileLevel", new.Level, "level", strings.ToLower(d.level.Level().String()))
		}
		return false
	}
	if d.level.Level() == want {
		return false
	}
	d.level.Set(want)
	d.Log(context.Background(), max(want, slog.LevelInfo), "log level changed", "level", new.Level, "file", file)
	return true
}

// parseLevel reads a level the configuration has checked already.
func parseLevel(s string) slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(s)) != nil {
		return slog.LevelInfo
	}
	return l
}

// setting returns the flag's value, else the environment's, and where it came from ("" when
// from neither).
func setting(flagValue, flag, envName string, lookupEnv env) (value, from string) {
	if flagValue != "" {
		return strings.ToLower(flagValue), flag
	}
	if v, ok := lookupEnv(envName); ok && v != "" {
		return strings.ToLower(v), "$" + envName
	}
	return "", ""
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
