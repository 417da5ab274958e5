package console_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/browsertest"
	"github.com/funduq/funduq-go/core/wire"
)

// hostileName is a provider name that would run script if it were markup.
const hostileName = `<img src=x onerror="window.__pwned=1"><b>bold</b>`

// countJS reads the runs table's count for a status.
func countJS(status string) string {
	return fmt.Sprintf(`(document.querySelector('#runs tr[data-status=%q] td:nth-child(2)') || {}).textContent`, status)
}

// In a real browser: the console asks for its token, then shows a provider
// that connects (its name shown as text, its agents, capacity and in-flight
// count) and its run counts changing as a run is queued, offered, taken and
// completed, and marks a withdrawn provider.
func TestConsoleInBrowser(t *testing.T) {
	h := nodetest.Start(t, withToken)
	b := browsertest.New(t)

	b.Run("open the console", chromedp.Navigate(h.URL+"/console"))
	b.Eventually("the token form", `document.querySelector('#login input[name=token]')`)
	b.Run("log in with a wrong token",
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Submit(chromedp.CSS("#login")))
	b.Eventually("the refusal", `document.getElementById('login-error')`)
	b.Run("log in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#login")))
	b.Eventually("the console, live", `document.getElementById('status').textContent.startsWith('live')`)
	b.Eventually("no provider yet", `document.querySelector('#providers tbody').textContent.includes('no provider is connected')`)
	b.Eventually("this node leads", `document.getElementById('this-node').textContent.includes('leader')`)

	p := h.Connect(0xc2, nodetest.Limit(3))
	register := func() {
		p.Send(wire.Register{Type: wire.TypeRegister, ProviderName: hostileName,
			Agents: []wire.Registration{{Name: "echo"}, {Name: "summarize"}}})
		p.Expect(wire.TypeRegistered, nil)
	}
	register()

	row := `document.querySelector('#providers tbody tr')`
	b.Eventually("the provider connects", row+`.textContent.includes('echo') && `+row+`.textContent.includes('summarize')`)
	if got := browsertest.Eval[string](b, row+`.children[1].textContent`); got != hostileName {
		t.Fatalf("provider name shown as %q", got)
	}
	if browsertest.Eval[bool](b, `!!document.querySelector('main img, main b') || window.__pwned === 1`) {
		t.Fatal("the provider's name was rendered as markup")
	}
	if got := browsertest.Eval[string](b, row+`.children[3].textContent + '/' + `+row+`.children[4].textContent`); got != "3/0" {
		t.Fatalf("capacity/in flight %q", got)
	}
	// Ended runs are PostgreSQL's estimate, labelled so: none before the
	// table's first ANALYZE (design.md §The operator console).
	if got := browsertest.Eval[string](b, countJS("completed")+` + '|' + document.querySelector('#runs tr[data-status="completed"] td:nth-child(3)').textContent`); got != "–|estimate" {
		t.Fatalf("completed before any run: %q", got)
	}
	if got := browsertest.Eval[string](b, `document.getElementById('runs-note').textContent`); !strings.Contains(got, "no statistics") {
		t.Fatalf("runs note before any ANALYZE: %q", got)
	}
	// Analyzed while empty: no runs, truly; and once runs are stored, that
	// ANALYZE says nothing of them (reltuples stays 0 until the next one),
	// so the page says it has no figure rather than "about 0 runs".
	if _, err := h.Store.Pool().Exec(context.Background(), `ANALYZE runs`); err != nil {
		t.Fatal(err)
	}
	b.Eventually("an empty table's estimate", `document.getElementById('runs-note').textContent.includes('about 0 runs stored')`)

	// A run: queued, offered (in flight 1), completed.
	id, thread := h.Door(p.Key, "echo", "", "hello")
	f := p.Offer()
	if f.RunID != id {
		t.Fatalf("offered %s, want %s", f.RunID, id)
	}
	b.Eventually("the run is offered and takes a place", countJS("offering")+` === '1' && `+row+`.children[4].textContent === '1'`)
	p.Accept(id)
	b.Eventually("the run is running", countJS("running")+` === '1' && document.getElementById('longest-running').textContent.includes('`+id+`')`)
	p.Complete(id, thread)
	h.WaitStatus(id, "completed")
	b.Eventually("the run ended", countJS("running")+` === '0' && `+row+`.children[4].textContent === '0'`)
	if got := browsertest.Eval[string](b, `document.getElementById('runs-note').textContent`); !strings.Contains(got, "no statistics") {
		t.Fatalf("runs note after an ANALYZE of the empty table, with a run stored: %q", got)
	}
	// A second completed run, then PostgreSQL's statistics (autovacuum
	// would take its time): the page shows their estimate, as one.
	h.CompletedRun(p, "echo", "again")
	if _, err := h.Store.Pool().Exec(context.Background(), `ANALYZE runs`); err != nil {
		t.Fatal(err)
	}
	b.Eventually("the completed runs, estimated", countJS("completed")+` === '≈ 2' && document.getElementById('runs-note').textContent.includes('about 2 runs stored')`)

	// A refused run fails with the provider's reason, listed as text.
	const reason = `<script>window.__pwned=1</script> overloaded`
	sid, _ := h.Door(p.Key, "summarize", "", "x")
	if f := p.Offer(); f.RunID != sid {
		t.Fatalf("offered %s, want %s", f.RunID, sid)
	}
	p.Refuse(sid, reason)
	b.Eventually("the failure is listed by reason", `document.querySelector('#failures tbody tr td:nth-child(3)') && document.querySelector('#failures tbody tr td:nth-child(3)').textContent === '1' && document.querySelector('#failures tbody tr td') && document.querySelector('#failures tbody tr td').textContent === `+strconv.Quote(reason))

	// Declining with room, three times, withdraws the provider at tolerance
	// (3): marked in the roster and in the quality table; its run waits queued.
	// It holds a run meanwhile, so its link stays open to be listed (a
	// withdrawn link is closed once it holds none, design.md D6).
	hid, _ := h.Door(p.Key, "summarize", "", "held")
	if f := p.Offer(); f.RunID != hid {
		t.Fatalf("offered %s, want %s", f.RunID, hid)
	}
	p.Accept(hid)
	h.WaitStatus(hid, "running")
	qid, _ := h.Door(p.Key, "echo", "", "anyone?")
	for i := range 3 {
		if f := p.Offer(); f.RunID != qid {
			t.Fatalf("offered %s, want %s", f.RunID, qid)
		}
		p.Decline(qid)
		if i < 2 {
			h.WaitStatus(qid, "queued")
			register() // offers the queued run again
		}
	}
	b.Eventually("the provider is marked withdrawn", `document.querySelector('#quality tbody tr.withdrawn') && document.querySelector('#quality tbody tr.withdrawn').textContent.includes('withdrawn') && `+
		row+`.textContent.includes('withdrawn')`)
	b.Eventually("the run waits queued", countJS("queued")+` === '1' && document.getElementById('oldest-queued').textContent.includes('`+qid+`')`)
	if got := browsertest.Eval[string](b, `document.querySelector('#quality tbody tr.withdrawn').children[1].textContent`); got != "3" {
		t.Fatalf("misdeclared counter shown as %q", got)
	}
	if browsertest.Eval[bool](b, `!!document.querySelector('main img, main b, main script') || window.__pwned === 1`) {
		t.Fatal("untrusted text was rendered as markup")
	}
	b.Screenshot("console.png")
	b.CheckClean()
}

// within is true when the element at sel (its row's cell i) ends inside
// its section: seen without scrolling the section sideways.
func within(sel string, i int) string {
	return fmt.Sprintf(`(() => { const c = document.querySelector(%q).children[%d];
		return c.getBoundingClientRect().right <= c.closest('section').getBoundingClientRect().right })()`, sel, i)
}

// A provider's name and its refusal reason are its own text, of any length
// and without a space: the console still shows every row whole — the
// provider's capacity and state, the failure's count — within its section,
// and the text itself is shortened with the whole (as much as the state
// keeps) in the title.
func TestConsoleLongProviderTextInBrowser(t *testing.T) {
	h := nodetest.Start(t, withToken)
	b := loggedIn(t, h.URL)

	name, reason := strings.Repeat("W", broker.MaxProviderNameBytes), strings.Repeat("R", 5000)
	p := h.Connect(0xc3, nodetest.Limit(3))
	p.Send(wire.Register{Type: wire.TypeRegister, ProviderName: name, Agents: []wire.Registration{{Name: strings.Repeat("a", 128)}}})
	p.Expect(wire.TypeRegistered, nil)
	id, _ := h.Door(p.Key, strings.Repeat("a", 128), "", "x")
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offered %s, want %s", f.RunID, id)
	}
	p.Refuse(id, reason)

	const prow, frow = `#providers tbody tr`, `#failures tbody tr`
	b.Eventually("the provider and its failure are listed", `document.querySelector('`+prow+`').textContent.includes('aaaa') && `+
		`document.querySelector('`+frow+` td') && document.querySelector('`+frow+` td').textContent.startsWith('RRRR')`)
	b.Screenshot("console-long.png")
	if !browsertest.Eval[bool](b, within(prow, 6)) {
		t.Errorf("the provider's state is off to the side, at x=%v", browsertest.Eval[float64](b, `document.querySelector('`+prow+`').children[6].getBoundingClientRect().right`))
	}
	if !browsertest.Eval[bool](b, within(frow, 2)) {
		t.Errorf("the failure's count is off to the side, at x=%v", browsertest.Eval[float64](b, `document.querySelector('`+frow+`').children[2].getBoundingClientRect().right`))
	}
	for _, sel := range []string{prow, frow} {
		if hgt := browsertest.Eval[float64](b, `document.querySelector('`+sel+`').getBoundingClientRect().height`); hgt > 200 {
			t.Errorf("%s is %vpx tall", sel, hgt)
		}
	}
	if got := browsertest.Eval[string](b, `document.querySelector('`+prow+`').children[1].title`); got != name {
		t.Errorf("the name is not in the title (%d characters)", len(got))
	}
	// The title holds the reason as far as the state keeps it.
	if got := browsertest.Eval[string](b, `document.querySelector('`+frow+`').children[0].title`); got != reason[:reasonChars] {
		t.Errorf("the reason is not in the title (%d characters)", len(got))
	}
	b.CheckClean()
}

// A provider chooses how many agents it serves: one with hundreds still
// takes a row of bounded height, so the providers after it stay in view,
// and says how many it serves.
func TestConsoleManyAgentsInBrowser(t *testing.T) {
	h := nodetest.Start(t, withManyAgents(400))
	b := loggedIn(t, h.URL)

	var regs []wire.Registration
	for i := range 400 {
		regs = append(regs, wire.Registration{Name: fmt.Sprintf("agent-%03d-%s", i, strings.Repeat("x", 100))})
	}
	p := h.Connect(0xc4, nil)
	p.Send(wire.Register{Type: wire.TypeRegister, Agents: regs})
	p.Expect(wire.TypeRegistered, nil)
	h.Connect(0xc5, nil).Register("echo")

	b.Eventually("both providers are listed", `document.querySelectorAll('#providers tbody tr').length === 2 && document.getElementById('providers').textContent.includes('echo')`)
	many := `[...document.querySelectorAll('#providers tbody tr')].find(r => r.textContent.includes('agent-000'))`
	if hgt := browsertest.Eval[float64](b, many+`.getBoundingClientRect().height`); hgt > 300 {
		t.Errorf("the provider with 400 agents takes a row %vpx tall", hgt)
	}
	if !browsertest.Eval[bool](b, many+`.children[2].textContent.includes('400')`) {
		t.Errorf("the row does not say how many agents: %q", browsertest.Eval[string](b, many+`.children[2].textContent.slice(-200)`))
	}
	b.CheckClean()
}

// loggedIn opens the console at base in a browser and logs in with the
// token, returning once the page polls the state live.
func loggedIn(t *testing.T, base string) *browsertest.Browser {
	t.Helper()
	b := browsertest.New(t)
	b.Run("open the console", chromedp.Navigate(base+"/console"))
	b.Eventually("the token form", `document.querySelector('#login input[name=token]')`)
	b.Run("log in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Submit(chromedp.CSS("#login")))
	b.Eventually("the console, live", `document.getElementById('status').textContent.startsWith('live')`)
	return b
}
