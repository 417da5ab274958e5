package wsconn_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// ReadFrame hands each frame over whole, whatever the frames before it
// were (buffers are shared and reused once released), and a frame over the
// link's read limit fails the read.
func TestReadFrameReusesBuffersSafely(t *testing.T) {
	p := newPair(t, 0)
	p.c.WS.SetReadLimit(256 << 10)
	sent := []string{strings.Repeat("a", 100<<10), "b", strings.Repeat("c", 3000), "", "d d d"}
	for _, s := range sent {
		if err := p.client.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	var kept [][]byte
	for i, want := range sent {
		kind, buf, err := wsconn.ReadFrame(p.c.WS)
		if err != nil || kind != websocket.TextMessage {
			t.Fatalf("frame %d: kind %d, %v", i, kind, err)
		}
		if buf.String() != want {
			t.Fatalf("frame %d: %d bytes, want %d", i, buf.Len(), len(want))
		}
		kept = append(kept, bytes.Clone(buf.Bytes()))
		wsconn.Release(buf)
	}
	for i, k := range kept {
		if string(k) != sent[i] {
			t.Fatalf("frame %d changed after later reads", i)
		}
	}
	if err := p.client.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte("x"), 300<<10)); err != nil {
		t.Fatal(err)
	}
	if _, buf, err := wsconn.ReadFrame(p.c.WS); !errors.Is(err, websocket.ErrReadLimit) || buf != nil {
		t.Fatalf("a frame over the limit: %v (buffer %v)", err, buf != nil)
	}
}

// ReadLoop hands each well-formed text frame to handle and each other
// frame's reason to refuse, in arrival order, and returns the read error
// that ends it: here the peer's close frame.
func TestReadLoopHandlesOrRefusesEveryFrame(t *testing.T) {
	p := newPair(t, 0)
	writes := []struct {
		kind int
		data string
	}{
		{websocket.TextMessage, `{"type":"a"}`},
		{websocket.BinaryMessage, `{"type":"b"}`},
		{websocket.TextMessage, `{"type":"c","type":"d"}`},
		{websocket.TextMessage, `not json`}, // malformed JSON is the decoder's to answer
		{websocket.TextMessage, `{"type":"e"}`},
	}
	for _, w := range writes {
		if err := p.client.WriteMessage(w.kind, []byte(w.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.client.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := wsconn.ReadLoop(p.c.WS, p.c.Closed(),
		func(f []byte) { got = append(got, "handle "+string(f)) },
		func(_ []byte, reason string) { got = append(got, "refuse "+reason) })
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure {
		t.Fatalf("ended with %v, want the peer's close frame", err)
	}
	want := []string{`handle {"type":"a"}`, "refuse " + wsconn.RefusedNotText, "", `handle not json`, `handle {"type":"e"}`}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if i == 2 {
			if !strings.HasPrefix(got[i], "refuse frame refused: ") {
				t.Fatalf("frame %d: %q, want a refusal of the repeated key", i, got[i])
			}
			continue
		}
		if got[i] != want[i] {
			t.Fatalf("frame %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// A link funduq closed ends the loop with no error.
func TestReadLoopEndsWhenClosed(t *testing.T) {
	p := newPair(t, 0)
	p.c.Close("test over")
	if err := wsconn.ReadLoop(p.c.WS, p.c.Closed(), func([]byte) { t.Error("handled a frame") }, func([]byte, string) { t.Error("refused a frame") }); err != nil {
		t.Fatalf("ended with %v", err)
	}
}
