package agui_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A caller that hangs up while its request waits in PostgreSQL is no
// fault of funduq's: the door's log says the caller went away, at INFO,
// and holds no ERROR, no 500 and no "internal" for it — the lines an
// operator alerts on. The turn it did not wait for is not written.
func TestCallerGoneMidRequestIsNotAnInternalError(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	logs := &syncbuf.Buffer{}
	srv := startDoor(t, h, func(o *agui.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	url := aguiURL(srv, p.Key, "echo")
	thread := doneThread(t, h, p, url)
	runs := runCount(t, h)

	// The next turn on the thread waits for the thread's row, held here...
	release := h.Hold(`SELECT 1 FROM threads WHERE thread_id = $1 FOR UPDATE`, thread)
	defer release()
	// ... and its caller hangs up.
	path := h.HangUpWhileLocked(url, input(thread, "r1", ""))
	var line map[string]any
	h.Eventually("the door logs the request's end", func() bool {
		line = logs.Record("path", path)
		return line != nil
	})
	if line["level"] != "INFO" || line["msg"] != "caller went away" {
		t.Errorf("the request's log line %v, want INFO \"caller went away\"", line)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"status":500`) || strings.Contains(l, `"code":"internal"`) {
			t.Errorf("logged as funduq's fault: %s", l)
		}
	}
	if n := runCount(t, h); n != runs {
		t.Errorf("%d runs written for a request whose caller left before it was admitted", n-runs)
	}
}
