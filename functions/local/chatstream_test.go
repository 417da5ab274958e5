package main

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/browsertest"
	"github.com/funduq/funduq-go/provider"
)

// streamDeltas is how many text deltas chatty streams.
const streamDeltas = 3000

// chatty streams a reply of streamDeltas deltas of ten characters, as a
// model streaming token by token does.
func chatty(ctx context.Context, r *provider.Run) error {
	evs := []map[string]any{{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID},
		{"type": "TEXT_MESSAGE_START", "messageId": "c1", "role": "assistant"}}
	for range streamDeltas {
		evs = append(evs, map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": "c1", "delta": "abcdefghij"})
	}
	evs = append(evs, map[string]any{"type": "TEXT_MESSAGE_END", "messageId": "c1"}, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	for _, ev := range evs {
		if err := r.Emit(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

// A reply streamed token by token costs the page work in proportion to
// its length: the page does not save every conversation it keeps again at
// every event (a reply of n deltas rewrote localStorage n times, each time
// whole, so a long reply in a long conversation froze the tab), and a
// reload still finds the whole reply.
func TestChatLongStreamInBrowser(t *testing.T) {
	h := nodetest.Start(t, nil)
	key := startProvider(t, h, 0xda, provider.Agent{Name: "chatty", Handler: chatty})
	base := startDoors(t, h)
	b := browsertest.New(t)
	b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
	b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	selectAgent(b, key, "chatty")
	// Count what the page writes to localStorage from here on.
	browsertest.Eval[bool](b, `(() => { const set = Storage.prototype.setItem; window.__writes = 0; window.__written = 0;
		Storage.prototype.setItem = function (k, v) { window.__writes++; window.__written += String(v).length; return set.call(this, k, v) }; return true })()`)
	say(b, "talk to me")
	want := strings.Repeat("abcdefghij", streamDeltas)
	b.Eventually("the whole reply", lastAgentText+` === '`+want+`' && !document.getElementById('send').disabled`)
	writes, written := browsertest.Eval[int](b, `window.__writes`), browsertest.Eval[int](b, `window.__written`)
	t.Logf("%d writes of %d characters in all for a reply of %d", writes, written, len(want))
	if writes > streamDeltas/10 || written > 40*len(want) {
		t.Errorf("the page wrote localStorage %d times, %d characters in all, for a reply of %d characters in %d deltas",
			writes, written, len(want), streamDeltas)
	}
	b.Run("reload", chromedp.Reload())
	b.Eventually("the page is ready again", `document.body.dataset.ready === '1'`)
	b.Eventually("the reply is kept", lastAgentText+` === '`+want+`'`)
	b.CheckClean()
}

// The same reply in a browser whose storage refuses every write (full, or
// blocked for the site): the page still shows it whole, and does not try
// to save again at every event (each try is every conversation turned to
// text up to five times, shorter each time).
func TestChatLongStreamStorageRefusedInBrowser(t *testing.T) {
	h := nodetest.Start(t, nil)
	key := startProvider(t, h, 0xdc, provider.Agent{Name: "chatty", Handler: chatty})
	base := startDoors(t, h)
	b := browsertest.New(t)
	b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
	b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	selectAgent(b, key, "chatty")
	browsertest.Eval[bool](b, `(() => { window.__tries = 0;
		Storage.prototype.setItem = function () { window.__tries++; throw new DOMException('full', 'QuotaExceededError') }; return true })()`)
	say(b, "talk to me")
	want := strings.Repeat("abcdefghij", streamDeltas)
	b.Eventually("the whole reply", lastAgentText+` === '`+want+`' && !document.getElementById('send').disabled`)
	if tries := browsertest.Eval[int](b, `window.__tries`); tries > streamDeltas/2 {
		t.Errorf("the page tried to save %d times for a reply of %d deltas", tries, streamDeltas)
	}
	b.CheckClean()
}
