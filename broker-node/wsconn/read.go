package wsconn

import (
	"bytes"
	"errors"
	"io"
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
	kind, buf, _, err = readFrame(ws, 0)
	return kind, buf, err
}

// readFrame is ReadFrame for frames bounded by limit (0: only by the
// connection's read limit): a frame over it is read through without being
// held, and what it named comes back instead of a buffer.
func readFrame(ws *websocket.Conn, limit int64) (kind int, buf *bytes.Buffer, over *Oversized, err error) {
	kind, r, err := ws.NextReader()
	if err != nil {
		return kind, nil, nil, err
	}
	buf = frames.Get().(*bytes.Buffer)
	buf.Reset()
	if limit > 0 {
		r = io.LimitReader(r, limit+1)
	}
	if _, err := buf.ReadFrom(r); err != nil {
		Release(buf)
		return kind, nil, nil, err
	}
	if limit <= 0 || int64(buf.Len()) <= limit {
		return kind, buf, nil, nil
	}
	s := &namesScan{}
	_, _ = s.Write(buf.Bytes())
	Release(buf)
	if _, err := io.Copy(s, r.(*io.LimitedReader).R); err != nil {
		return kind, nil, nil, err
	}
	o := s.result()
	return kind, nil, &o, nil
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
	return ReadLoopLimited(ws, closed, 0, handle, refuse, nil)
}

// ReadLoopLimited is ReadLoop for a link that answers a frame over its
// limit (> 0) instead of closing on it: such a frame is read through and
// dropped, up to DiscardFactor times limit (the connection's read limit is
// raised to that), and over is told what it named; a frame over it
// that is not text goes to refuse, with no bytes. A peer that sent one
// large frame keeps its link, and funduq can still answer for the run the
// frame was about.
func ReadLoopLimited(ws *websocket.Conn, closed <-chan struct{}, limit int64, handle func(frame []byte),
	refuse func(frame []byte, reason string), over func(Oversized)) error {
	if over == nil {
		limit = 0
	}
	if limit > 0 {
		ws.SetReadLimit(limit * DiscardFactor)
	}
	ws.SetPongHandler(func(string) error { return ws.SetReadDeadline(time.Now().Add(ReadIdle)) })
	for {
		select {
		case <-closed:
			return nil
		default:
		}
		_ = ws.SetReadDeadline(time.Now().Add(ReadIdle))
		kind, buf, o, err := readFrame(ws, limit)
		if err != nil {
			return err
		}
		switch {
		case o != nil && kind != websocket.TextMessage:
			refuse(nil, RefusedNotText)
		case o != nil:
			over(*o)
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
