package main

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/browsertest"
	"github.com/funduq/funduq-go/provider"
)

// replies answers every turn with text, in one message.
func replies(text string) provider.Handler {
	return func(ctx context.Context, r *provider.Run) error {
		if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
			return err
		}
		if err := r.EmitText(ctx, r.ID+"-reply", text); err != nil {
			return err
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	}
}

// Two tabs of the chat page share one localStorage: a conversation held
// in one tab is kept when the other tab, opened before it, talks to
// another agent (each tab saved every conversation as it had read them,
// so the last tab to write wiped what the other had said), and the other
// tab shows it when the user picks that agent there.
func TestChatTwoTabsInBrowser(t *testing.T) {
	h := nodetest.Start(t, nil)
	key := startProvider(t, h, 0xdb, provider.Agent{Name: "one", Handler: replies("reply one")},
		provider.Agent{Name: "two", Handler: replies("reply two")})
	base := startDoors(t, h)
	b1 := browsertest.New(t)
	b2 := b1.NewTab()
	for _, b := range []*browsertest.Browser{b1, b2} {
		b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
		b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	}

	selectAgent(b1, key, "one")
	say(b1, "hello one")
	b1.Eventually("the first tab's reply", lastAgentText+` === 'reply one' && !document.getElementById('send').disabled`)

	selectAgent(b2, key, "two")
	say(b2, "hello two")
	b2.Eventually("the second tab's reply", lastAgentText+` === 'reply two' && !document.getElementById('send').disabled`)

	selectAgent(b2, key, "one")
	b2.Eventually("the first tab's conversation, in the second tab", `document.getElementById('transcript').textContent.includes('hello one')`)

	// The second tab goes on with that conversation; the first, still
	// showing it as it was, goes on too: both turns are kept.
	say(b2, "more one")
	b2.Eventually("the second tab's turn with one", `document.getElementById('transcript').textContent.includes('more one') && !document.getElementById('send').disabled`)
	say(b1, "again one")
	b1.Eventually("the first tab's next turn", `document.getElementById('transcript').textContent.includes('again one') && !document.getElementById('send').disabled`)

	b1.Run("reload the first tab", chromedp.Reload())
	b1.Eventually("the page is ready again", `document.body.dataset.ready === '1'`)
	for _, agent := range []string{"two", "one"} {
		selectAgent(b1, key, agent)
		b1.Eventually("the conversation with "+agent+" is kept", `document.getElementById('transcript').textContent.includes('hello `+agent+`')`)
	}
	if got := browsertest.Eval[string](b1, `[...document.querySelectorAll('#transcript .msg.user .text')].map(e => e.textContent).join('|')`); got != "hello one|more one|again one" {
		t.Errorf("the conversation with one, after both tabs went on with it: %q", got)
	}
	b1.CheckClean()
}

// A caller in another browser (another profile: a stranger on the same
// chat page) starts from nothing: the first caller's conversation with
// the same agent is not shown to it, its turn opens a thread of its own,
// and neither page puts an id in its address, where history, bookmarks
// and shared links would carry it.
func TestChatStrangerInBrowser(t *testing.T) {
	h := nodetest.Start(t, nil)
	key := startProvider(t, h, 0xdd, provider.Agent{Name: "one", Handler: replies("reply one")})
	base := startDoors(t, h)
	a, b := browsertest.New(t), browsertest.New(t)
	for _, x := range []*browsertest.Browser{a, b} {
		x.Run("open the chat page", chromedp.Navigate(base+"/chat"))
		x.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	}
	thread := func(x *browsertest.Browser) string {
		return browsertest.Eval[string](x, `JSON.parse(localStorage.getItem('funduq.chat.v1')).convs[`+strconv.Quote(key+"/one")+`].threadId`)
	}
	selectAgent(a, key, "one")
	say(a, "a secret of the first caller")
	a.Eventually("the reply", lastAgentText+` === 'reply one' && !document.getElementById('send').disabled`)

	selectAgent(b, key, "one")
	b.Eventually("a new conversation", `document.getElementById('thread-info').textContent === 'a new conversation'`)
	say(b, "hello")
	b.Eventually("the reply", lastAgentText+` === 'reply one' && !document.getElementById('send').disabled`)
	if got := browsertest.Eval[string](b, `document.body.innerText`); strings.Contains(got, "secret") {
		t.Errorf("the stranger's page shows the first caller's words:\n%s", got)
	}
	if ta, tb := thread(a), thread(b); ta == "" || ta == tb {
		t.Errorf("threads %q and %q", ta, tb)
	}
	for _, x := range []*browsertest.Browser{a, b} {
		if u := browsertest.Eval[string](x, `location.href`); u != base+"/chat" {
			t.Errorf("the page's address is %s", u)
		}
	}
	a.CheckClean()
	b.CheckClean()
}

// A conversation whose reply is too long for localStorage is saved
// shortened, and stays the tab's own to show whole (f49a125). Another tab
// that goes on with that conversation keeps its turn: the first tab,
// saving again for any reason (the user picks another agent), wrote its
// stale copy over it, as if the second tab had never spoken.
func TestChatTwoTabsKeepATurnAfterAShortenedReply(t *testing.T) {
	h := nodetest.Start(t, nil)
	chunk := strings.Repeat("F", 750_000)
	var floods atomic.Int32
	key := startProvider(t, h, 0xde, provider.Agent{Name: "one", Handler: replies("reply one")},
		provider.Agent{Name: "flood", Handler: func(ctx context.Context, r *provider.Run) error {
			if floods.Add(1) > 1 {
				return replies("short")(ctx, r)
			}
			evs := []map[string]any{{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID},
				{"type": "TEXT_MESSAGE_START", "messageId": "f1", "role": "assistant"},
				{"type": "TEXT_MESSAGE_CONTENT", "messageId": "f1", "delta": chunk},
				{"type": "TEXT_MESSAGE_CONTENT", "messageId": "f1", "delta": chunk},
				{"type": "TEXT_MESSAGE_END", "messageId": "f1"}, {"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID}}
			for _, ev := range evs {
				if err := r.Emit(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		}})
	base := startDoors(t, h)
	b1 := browsertest.New(t)
	b2 := b1.NewTab()
	for _, b := range []*browsertest.Browser{b1, b2} {
		b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
		b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	}
	// Most of the quota taken already (both tabs share it), so a reply of
	// 1.5 million characters passes it.
	browsertest.Eval[bool](b1, `(localStorage.setItem('other', 'x'.repeat(4000000)), true)`)

	selectAgent(b1, key, "flood")
	say(b1, "flood me")
	b1.Eventually("the long reply", `(document.querySelector('#events li:last-child .type') || {}).textContent === 'RUN_FINISHED ' && !document.getElementById('send').disabled`)

	selectAgent(b2, key, "flood")
	b2.Eventually("the first tab's conversation, in the second tab", `document.getElementById('transcript').textContent.includes('flood me')`)
	say(b2, "more flood")
	b2.Eventually("the second tab's turn", lastAgentText+` === 'short' && !document.getElementById('send').disabled`)

	// The first tab saves again: picking another agent is enough.
	selectAgent(b1, key, "one")
	b1.Eventually("the other conversation", `document.getElementById('thread-info').textContent === 'a new conversation'`)

	b2.Run("reload the second tab", chromedp.Reload())
	b2.Eventually("the page is ready again", `document.body.dataset.ready === '1'`)
	selectAgent(b2, key, "flood")
	b2.Eventually("the conversation with flood", `document.getElementById('transcript').textContent.includes('flood me')`)
	if got := browsertest.Eval[string](b2, `[...document.querySelectorAll('#transcript .msg.user .text')].map(e => e.textContent).join('|')`); got != "flood me|more flood" {
		t.Errorf("the conversation with flood, after the second tab went on with it and the first tab saved: %q", got)
	}
	b1.CheckClean()
	b2.CheckClean()
}
