package wsconn

import (
	"bytes"
	"sync"

	"github.com/gorilla/websocket"
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
