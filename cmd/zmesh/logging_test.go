package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
)

func envOf(m map[string]string) env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// logged returns what a logger made from lf and environment e writes for one debug and one
// info line.
func logged(t *testing.T, lf logFlags, e map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	log, err := newLogger(&buf, lf, envOf(e))
	if err != nil {
		t.Fatalf("newLogger(%+v, %v): %v", lf, e, err)
	}
	log.Debug("debug line")
	log.Info("info line", "k", "v")
	return buf.String()
}

// TestLogSettings: info and text unless ZMESH_LOG_LEVEL and ZMESH_LOG_FORMAT say otherwise,
// and the flags over both.
func TestLogSettings(t *testing.T) {
	t.Parallel()
	out := logged(t, logFlags{}, nil)
	if strings.Contains(out, "debug line") || !strings.HasPrefix(out, "time=") || !strings.Contains(out, `msg="info line" k=v`) {
		t.Errorf("defaults: %q, want the info line alone, as text with its time", out)
	}
	out = logged(t, logFlags{}, map[string]string{envLogLevel: "DEBUG", envLogFormat: "json"})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var info map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &info) != nil || info["msg"] != "info line" || info["k"] != "v" || info["time"] == nil {
		t.Errorf("from the environment: %q, want two JSON lines, debug and info", out)
	}
	out = logged(t, logFlags{level: "warn", format: "text"}, map[string]string{envLogLevel: "debug", envLogFormat: "json"})
	if out != "" {
		t.Errorf("flags over the environment: %q, want nothing at warn", out)
	}
}

// TestLogSettingsRefused: a level or format that is not allowed is a usage error that says
// where it came from.
func TestLogSettingsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lf   logFlags
		e    map[string]string
		want string
	}{
		{logFlags{level: "loud"}, nil, `--log-level "loud" is not allowed; allowed: debug, info, warn, error`},
		{logFlags{format: "xml"}, nil, `--log-format "xml" is not allowed; allowed: text, json`},
		{logFlags{}, map[string]string{envLogLevel: "loud"}, `$ZMESH_LOG_LEVEL "loud" is not allowed`},
		{logFlags{}, map[string]string{envLogFormat: "logfmt"}, `$ZMESH_LOG_FORMAT "logfmt" is not allowed`},
	} {
		_, err := newLogger(&bytes.Buffer{}, tc.lf, envOf(tc.e))
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != exitUsage {
			t.Errorf("%+v %v: %v, want a usage error with %q", tc.lf, tc.e, err, tc.want)
		}
	}
	if _, errOut, code := status(t, "router", "run", "--log-format", "xml", "/nonexistent/router.yml"); code != exitUsage || !strings.Contains(errOut, `--log-format "xml"`) {
		t.Errorf("router run --log-format xml: exit %d, %q", code, errOut)
	}
}

// TestJournalLinesHaveNoTime: under journald (JOURNAL_STREAM names standard error) the lines
// leave their time to the journal.
func TestJournalLinesHaveNoTime(t *testing.T) {
	t.Parallel()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(os.Stderr.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	ours := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	for _, tc := range []struct {
		stream string
		w      any
		want   bool
	}{
		{ours, os.Stderr, true},
		{"", os.Stderr, false},
		{fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), os.Stderr, false}, // another stream: a redirection
		{ours, os.Stdout, false},
	} {
		e := map[string]string{}
		if tc.stream != "" {
			e["JOURNAL_STREAM"] = tc.stream
		}
		if got := toJournal(tc.w.(*os.File), envOf(e)); got != tc.want {
			t.Errorf("JOURNAL_STREAM %q, writer %v: %v, want %v", tc.stream, tc.w.(*os.File).Name(), got, tc.want)
		}
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime})).Info("hello", slog.Group("g", "time", "kept"))
	if got := buf.String(); got != "level=INFO msg=hello g.time=kept\n" {
		t.Errorf("without time: %q", got)
	}
}
