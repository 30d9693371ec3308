package ctrlproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"
)

func TestMalformedFramesClose(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    header
		body []byte
		want error
	}{
		{"oversized length", header{typ: TypeHello, seq: 1, size: DefaultMaxBodySize + 1}, nil, ErrFrameTooLarge},
		{"length near 4 GiB", header{typ: TypeHello, seq: 1, size: ^uint32(0)}, nil, ErrFrameTooLarge},
		{"sequence 0", header{typ: TypeHello, size: 2}, []byte("{}"), ErrBadFrame},
		{"truncated body", header{typ: TypeHello, seq: 1, size: 100}, []byte(`{"routerId":`), io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, raw := withRaw(t, Options{})
			writeFrame(t, raw, tt.h, tt.body)
			if errors.Is(tt.want, io.ErrUnexpectedEOF) {
				raw.Close()
			}
			if err := waitDone(t, ch, 5*time.Second); !errors.Is(err, tt.want) {
				t.Fatalf("Err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMalformedMessagesAnswered(t *testing.T) {
	t.Parallel()
	ch, raw := withRaw(t, Options{})
	got := make(chan *Fault, 1)
	ch.Handle(TypeFault, func(_ context.Context, m Message) (Message, error) { got <- m.(*Fault); return nil, nil })
	ch.Handle(TypeTerminatorCreate, func(_ context.Context, m Message) (Message, error) { return &TerminatorCreateReply{}, nil })

	// Unknown types and bad bodies: requests get an Error reply, one-way messages are
	// dropped, and the channel stays open.
	writeFrame(t, raw, header{typ: 999, seq: 1, size: 2}, []byte("{}"))
	writeFrame(t, raw, header{typ: 999, flags: flagWantReply, seq: 2, size: 2}, []byte("{}"))
	writeFrame(t, raw, header{typ: TypeTerminatorCreate, flags: flagWantReply, seq: 3, size: 5}, []byte(`{"x":`))
	writeFrame(t, raw, header{typ: TypeFault, seq: 4, size: 3}, []byte(`[1]`))
	writeFrame(t, raw, header{typ: TypeFault, seq: 5, size: 15}, []byte(`{"circuitId":9}`))
	codes := map[uint32]string{}
	for len(codes) < 2 {
		h, body := readUntil(t, raw, func(h header, _ []byte) bool { return h.typ == TypeError })
		var e Error
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatal(err)
		}
		codes[h.replyTo] = e.Code
	}
	if codes[2] != ErrCodeUnsupported || codes[3] != ErrCodeBadMessage {
		t.Errorf("error replies by request = %v", codes)
	}
	select {
	case f := <-got:
		if f.CircuitID != 9 {
			t.Errorf("fault = %+v", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the valid message after the malformed ones was not handled")
	}
	if ch.Err() != nil {
		t.Fatalf("channel closed: %v", ch.Err())
	}
}

func TestOversizedSendRefused(t *testing.T) {
	t.Parallel()
	router, _ := pair(t, Options{MaxBodySize: 64}, nil)
	err := router.Send(t.Context(), &Metrics{Values: map[string]float64{string(bytes.Repeat([]byte("x"), 100)): 1}})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v", err)
	}
	if router.Err() != nil {
		t.Fatalf("channel closed: %v", router.Err())
	}
}

// FuzzDecode feeds arbitrary bytes to the frame reader and the message decoder: they may
// refuse input but never panic, and every frame they accept re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	frameOf := func(h header, body string) []byte {
		b := make([]byte, headerSize)
		h.size = uint32(len(body))
		h.put(b)
		return append(b, body...)
	}
	f.Add(frameOf(header{typ: TypeHello, seq: 1}, `{"routerId":"r1","protocol":1,"linkListeners":[{"address":"tls:a:1","groups":["g"]}]}`))
	f.Add(frameOf(header{typ: TypeRoute, flags: flagWantReply, seq: 2}, `{"circuitId":5,"forward":{"xgress":{"binding":"proxy","address":"tcp:x:1"}},"reverse":{"router":"r2"},"timeout":1000}`))
	f.Add(frameOf(header{typ: TypeCircuitReply, seq: 3, replyTo: 2}, `{"circuitId":1,"path":["a"],"errorCode":"NO_PATH"}`))
	f.Add(frameOf(header{typ: TypeMetrics, seq: 4}, `{"timestamp":"2026-01-01T00:00:00Z","values":{"a":1.5}}`))
	f.Add(frameOf(header{typ: TypePing, seq: 5}, ""))
	f.Add(frameOf(header{typ: 999, seq: 6}, `{}`))
	f.Add(append(frameOf(header{typ: TypeFault, seq: 7}, `{"circuitId":1}`), 0, 1, 0))
	f.Add([]byte{0, 10, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		hbuf := make([]byte, headerSize)
		for {
			start := len(data) - r.Len()
			h, body, err := readFrame(r, hbuf, 1<<16)
			if err != nil {
				return
			}
			if h.size != uint32(len(body)) {
				t.Fatalf("header says %d bytes, body has %d", h.size, len(body))
			}
			again := make([]byte, headerSize)
			h.put(again)
			if !bytes.Equal(append(again, body...), data[start:len(data)-r.Len()]) {
				t.Fatal("frame does not re-encode to its bytes")
			}
			if m, err := decodeMessage(h.typ, body); err == nil {
				if _, err := json.Marshal(m); err != nil {
					t.Fatalf("decoded %s does not encode: %v", h.typ, err)
				}
			}
		}
	})
}
