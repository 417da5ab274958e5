package main

import (
	"context"
	"strconv"
	"strings"
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
