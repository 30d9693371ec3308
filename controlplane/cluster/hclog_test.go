package cluster

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestHCLogger checks that raft's hclog calls reach slog with their level, the logger's
// name (once, however it was named) and its arguments.
func TestHCLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := newHCLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Fatalf("levels: debug %v info %v level %v", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
	l.Named("raft").Named("net").With("peer", "c2").Warn("failed to contact", "term", 3)
	l.Debug("hidden")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("one record expected: %q: %v", buf.String(), err)
	}
	if rec["level"] != "WARN" || rec["msg"] != "failed to contact" || rec["raft"] != "raft.net" ||
		rec["peer"] != "c2" || rec["term"] != float64(3) {
		t.Fatalf("record %v", rec)
	}
}

// TestHCLoggerFormat checks that an argument made with hclog.Fmt is rendered as its format
// says (raft logs its configuration so), not as the list of format and operands.
func TestHCLoggerFormat(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := newHCLogger(slog.New(slog.NewJSONHandler(&buf, nil)))
	l.Info("initial configuration", "servers", hclog.Fmt("%+v", []struct{ ID string }{{"a"}}))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("one record expected: %q: %v", buf.String(), err)
	}
	if rec["servers"] != "[{ID:a}]" {
		t.Fatalf("servers %q, want [{ID:a}]", rec["servers"])
	}
}
