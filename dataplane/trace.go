package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// The message trace (trace.path): every frame of the control channel, read or written, is
// one JSON line of the file:
//
//	{"time":"2025-01-02T15:04:05.123456789Z","direction":"out","remote":"10.0.0.1:6262",
//	 "type":"CircuitRequest","typeId":20,"seq":7,"replyTo":0,"request":true,"message":{...}}
//
// time is when the channel read or wrote it (RFC 3339, nanoseconds); direction is "in" (from
// the controller) or "out" (to it); remote is the controller's address; seq is the frame's
// sequence on its channel, replyTo the seq of the request a reply answers (0 otherwise), and
// request tells that the sender waits for a reply; message is the message as the channel
// carries it, JSON. A body that is not JSON (a malformed frame) is written as a string with
// "malformed":true. The file is opened for appending (0600), so that the trace of a run that
// failed survives the next start; lines are buffered, and written at least every second and
// at stop.

// traceFlushInterval is how often buffered trace lines reach the file.
const traceFlushInterval = time.Second

// traceFile writes trace lines. The channel calls it on its reading and writing goroutines;
// the buffer makes a write cost a copy, and a file write once per 64 KiB.
type traceFile struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	failed bool // a write failed (logged once); nothing more is written
}

// traceLine is one line of the trace.
type traceLine struct {
	Time      time.Time       `json:"time"`
	Direction string          `json:"direction"`
	Remote    string          `json:"remote"`
	Type      string          `json:"type"`
	TypeID    uint16          `json:"typeId"`
	Seq       uint32          `json:"seq"`
	ReplyTo   uint32          `json:"replyTo"`
	Request   bool            `json:"request"`
	Message   json.RawMessage `json:"message"`
	Malformed bool            `json:"malformed,omitempty"`
}

func openTrace(path string, log *slog.Logger) (*traceFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("trace.path: %w", err)
	}
	// The trace holds session tokens (SessionState messages): an existing file keeps its mode on
	// open, so it is made private here too.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("trace.path %s: %w", path, err)
	}
	return &traceFile{path: path, log: log, f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// hook returns the channel's trace hook for a channel to the controller at remote.
func (t *traceFile) hook(remote string) func(ctrlproto.TraceEvent) {
	return func(e ctrlproto.TraceEvent) {
		line := traceLine{Time: e.Time.UTC(), Direction: e.Direction, Remote: remote, Type: e.Type.String(), TypeID: uint16(e.Type),
			Seq: e.Seq, ReplyTo: e.ReplyTo, Request: e.WantReply, Message: e.Body}
		if len(e.Body) == 0 {
			line.Message = json.RawMessage("{}") // an empty body is the type's zero value
		}
		// Marshal checks the raw message (and compacts it); a body that is not JSON would
		// otherwise break the line.
		data, err := json.Marshal(line)
		if err != nil {
			quoted, _ := json.Marshal(string(e.Body))
			line.Message, line.Malformed = quoted, true
			if data, err = json.Marshal(line); err != nil {
				return
			}
		}
		t.write(append(data, '\n'))
	}
}

func (t *traceFile) write(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed || t.f == nil {
		return
	}
	if _, err := t.w.Write(line); err != nil {
		t.fail(err)
	}
}

// fail stops the trace after a write error; with mu held.
func (t *traceFile) fail(err error) {
	t.failed = true
	t.log.Error("message trace: cannot write; tracing stops", "file", t.path, "err", err)
}

// flushLoop writes the buffered lines every traceFlushInterval until ctx ends.
func (t *traceFile) flushLoop(ctx context.Context) {
	tk := time.NewTicker(traceFlushInterval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			t.mu.Lock()
			if !t.failed && t.f != nil {
				if err := t.w.Flush(); err != nil {
					t.fail(err)
				}
			}
			t.mu.Unlock()
		}
	}
}

// close writes what is buffered and closes the file; later lines are dropped.
func (t *traceFile) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f == nil {
		return nil
	}
	var err error
	if !t.failed {
		err = t.w.Flush()
	}
	err = errors.Join(err, t.f.Close())
	t.f = nil
	if err != nil {
		return fmt.Errorf("trace.path %s: %w", t.path, err)
	}
	return nil
}
