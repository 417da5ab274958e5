package a2a_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A2A 1.0 §3.6.1 lets a client state its protocol version in an
// A2A-Version query parameter instead of the header (a client that cannot
// set headers; the Java reference SDK's router reads the header, then the
// query). Such a 1.0 client is served in 1.0 — its SendMessage is not
// "not an A2A 0.3 method" — an unsupported version in the query is
// refused -32009 as in the header, and the header, when both are sent,
// decides.
func TestOutsideVersionInTheQuery(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	base := newClient(t, srv, p.Key, "echo", "")
	for i, q := range []string{"A2A-Version=1.0", "a2a-version=1.0", "A2A-Version=1"} {
		c := &client{t: t, url: base.url + "?" + q}
		r := c.rawCall(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"q-%d","role":"ROLE_USER","parts":[{"text":"hi"}]},"configuration":{"returnImmediately":true}}}`, i), nil)
		if r.Error != nil {
			t.Errorf("?%s SendMessage: refused %d %s", q, r.Error.Code, r.Error.Message)
			continue
		}
		task, _ := r.Result["task"].(map[string]any)
		if task == nil || stateOf(task) != "TASK_STATE_SUBMITTED" && stateOf(task) != "TASK_STATE_WORKING" {
			t.Errorf("?%s SendMessage: result %v, want a 1.0 task", q, r.Result)
		}
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
	}
	c := &client{t: t, url: base.url + "?A2A-Version=2.0"}
	if r := c.rawCall(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`, nil); r.Error == nil || r.Error.Code != a2a.CodeVersionNotSupported {
		t.Errorf("?A2A-Version=2.0: %+v, want %d", r.Error, a2a.CodeVersionNotSupported)
	}
	c = &client{t: t, url: base.url + "?A2A-Version=1.0", version: "0.3"}
	if r := c.rawCall(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}`, nil); r.Error == nil || r.Error.Code != a2a.CodeTaskNotFound {
		t.Errorf("header 0.3 over query 1.0: %+v, want the 0.3 method served (%d)", r.Error, a2a.CodeTaskNotFound)
	}
}

// The agent card is chosen by the version a request states the same way a
// call is: A2A-Version in the query serves a client that cannot set
// headers (A2A 1.0 §3.6.1) its 1.0 card, as it serves that client's calls
// in 1.0; a header stands over the query. On main the card read the
// header alone, so GET …/agent-card.json?A2A-Version=1.0 was the 0.3 card
// (url, protocolVersion 0.3.0) while the same client's calls were 1.0.
func TestOutsideCardVersionInTheQuery(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	cardURL := srv.URL + "/a2a/" + p.Key + "/echo/.well-known/agent-card.json"
	get := func(query, header string) map[string]any {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, cardURL+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if header != "" {
			req.Header.Set(a2a.VersionHeader, header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var card map[string]any
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&card) != nil {
			t.Fatalf("card%s: %d", query, resp.StatusCode)
		}
		return card
	}
	is10 := func(card map[string]any) bool {
		_, ifaces := card["supportedInterfaces"]
		_, url := card["url"]
		return ifaces && !url
	}
	for _, q := range []string{"?A2A-Version=1.0", "?a2a-version=1"} {
		if card := get(q, ""); !is10(card) {
			t.Errorf("card%s: %v; want the 1.0 card (supportedInterfaces, no url)", q, card)
		}
	}
	if card := get("", ""); is10(card) {
		t.Errorf("card without a version: %v; want the 0.3 card", card)
	}
	if card := get("?A2A-Version=1.0", "0.3"); is10(card) {
		t.Errorf("header 0.3 over query 1.0: %v; want the 0.3 card", card)
	}
}
