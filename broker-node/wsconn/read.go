package wsconn

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/strictjson"
)

// frames are the read buffers links share: a link holds one only while it
// reads and decodes a frame, so an idle link keeps none.
var frames = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// keepFrame bounds the buffers the pool keeps: one grown by a rare large
// frame is left to the collector.
const keepFrame = 64 << 10

// ReadFrame reads ws's next message into a pooled buffer (gorilla's
// ReadMessage allocates a fresh one for every frame). The buffer is the
// caller's until Release: decode it, keep nothing that aliases it.
func ReadFrame(ws *websocket.Conn) (kind int, buf *bytes.Buffer, err error) {
	kind, r, err := ws.NextReader()
	if err != nil {
		return kind, nil, err
	}
	buf = frames.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		Release(buf)
		return kind, nil, err
	}
	return kind, buf, nil
}

// Release gives a ReadFrame buffer back.
func Release(buf *bytes.Buffer) {
	if buf == nil || buf.Cap() > keepFrame {
		return
	}
	frames.Put(buf)
}

// RefusedNotText is the reason ReadLoop refuses a frame that is not a
// text message with: a defect of the frame, whatever its bytes hold.
const RefusedNotText = "frame refused: not a text message (frames are JSON text)"

// ReadLoop reads ws's frames in arrival order until a read fails or closed
// is closed, and returns the read's error (nil when closed ended it). Each
// text frame that passes the doors' strict JSON check (a repeated key,
// invalid UTF-8, nesting too deep: two readers of one frame must never
// disagree about what it names) goes to handle; anything else goes to
// refuse with the frame and the reason, for the caller to answer the peer
// (and to tell from the frame what it was about, if it can). The bytes given
// to handle and refuse are valid only during the call.
//
// The read deadline (ReadIdle) is set before each read, not after it:
// handling a frame may wait (an event waits while the link's backlog is
// full), and that wait is funduq's, not the peer's silence. A pong extends
// it too.
func ReadLoop(ws *websocket.Conn, closed <-chan struct{}, handle func(frame []byte), refuse func(frame []byte, reason string)) error {
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(ReadIdle)) })
	for {
		select {
		case <-closed:
			return nil
		default:
		}
		_ = ws.SetReadDeadline(time.Now().Add(ReadIdle))
		kind, buf, err := ReadFrame(ws)
		if err != nil {
			return err
		}
		switch {
		case kind != websocket.TextMessage:
			refuse(buf.Bytes(), RefusedNotText)
		default:
			if err := strictjson.Check(buf.Bytes(), 0); err != nil && !errors.Is(err, strictjson.ErrMalformed) {
				refuse(buf.Bytes(), "frame refused: "+err.Error())
			} else {
				handle(buf.Bytes())
			}
		}
		Release(buf)
	}
}
