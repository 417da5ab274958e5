package a2a_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/agui"
)

// The same agent called once over AG-UI and once over A2A, with the same
// text and the same authority (an actor chain, its presenter proof, a KYOK
// opt-in), receives byte-identical forwardedProps.funduq apart from the
// run-bound token: one builder (D4). The delivered messages agree too,
// apart from their ids.
func TestSameFunduqPropsOverBothDoors(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	// A registered KYOK offering to opt in to (the doors only check it exists).
	if _, err := h.Store.Pool().Exec(context.Background(),
		`INSERT INTO llm_offerings (provider_key, name) VALUES ($1, 'model-x')`, p.Key); err != nil {
		t.Fatal(err)
	}
	a2aSrv := startDoor(t, h, nil)
	deps := doorDeps(t, h)
	ag, err := agui.New(agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret})
	if err != nil {
		t.Fatal(err)
	}
	aguiSrv := httptest.NewServer(ag)
	t.Cleanup(func() { aguiSrv.CloseClientConnections(); aguiSrv.Close(); deps.Close() })

	caller := signer(t, 0xc1)
	bag := map[string]any{"actorChain": chainOf(t, caller), "kyok": map[string]any{"llmProvider": map[string]any{"providerKey": p.Key, "name": "model-x"}},
		"team": "blue", "funduq": map[string]any{"forged": true}}

	// AG-UI.
	aguiBody, _ := json.Marshal(map[string]any{"threadId": "t", "runId": "r", "state": nil, "tools": []any{}, "context": []any{},
		"messages": []any{map[string]any{"id": "u1", "role": "user", "content": "same text"}}, "forwardedProps": bag})
	req, _ := http.NewRequest(http.MethodPost, aguiSrv.URL+"/agui/"+p.Key+"/echo", strings.NewReader(string(aguiBody)))
	req.Header.Set(identity.PresenterHeader, identity.MakePresenterHeader(caller, time.Now().Unix(), aguiBody))
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("agui: %d %s", resp.StatusCode, b)
	}
	fAGUI := p.Offer()
	p.Accept(fAGUI.RunID)
	p.Complete(fAGUI.RunID, *fAGUI.ThreadID)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()

	// A2A.
	c := newClient(t, a2aSrv, p.Key, "echo", "1.0")
	body := c.body("SendMessage", map[string]any{"message": c.message("m-1", "same text", nil), "metadata": bag,
		"configuration": map[string]any{"returnImmediately": true}})
	if r := c.rawCall(body, map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(caller, time.Now().Unix(), []byte(body))}); r.Error != nil {
		t.Fatalf("a2a: %+v", r.Error)
	}
	fA2A := p.Offer()

	props := func(f wire.RunFrame) (map[string]json.RawMessage, map[string]json.RawMessage, json.RawMessage) {
		var in struct {
			Messages       []map[string]json.RawMessage `json:"messages"`
			ForwardedProps map[string]json.RawMessage   `json:"forwardedProps"`
		}
		if err := json.Unmarshal(f.RunInput, &in); err != nil || len(in.Messages) != 1 {
			t.Fatalf("input %s: %v", f.RunInput, err)
		}
		var fq map[string]json.RawMessage
		if err := json.Unmarshal(in.ForwardedProps["funduq"], &fq); err != nil {
			t.Fatalf("forwardedProps.funduq %s: %v", in.ForwardedProps["funduq"], err)
		}
		delete(in.Messages[0], "id")
		msg, _ := json.Marshal(in.Messages[0])
		return fq, in.ForwardedProps, msg
	}
	fqA, fpA, msgA := props(fAGUI)
	fqB, fpB, msgB := props(fA2A)
	for _, fq := range []map[string]json.RawMessage{fqA, fqB} {
		var k struct {
			Token string `json:"token"`
		}
		if json.Unmarshal(fq["kyok"], &k) != nil || k.Token == "" {
			t.Fatalf("no KYOK grant in %v", fq)
		}
		fq["kyok"] = json.RawMessage(`{"token":"<run-bound>"}`)
	}
	a, _ := json.Marshal(fqA)
	b, _ := json.Marshal(fqB)
	if string(a) != string(b) {
		t.Errorf("forwardedProps.funduq differ:\n agui %s\n a2a  %s", a, b)
	}
	if string(fpA["team"]) != `"blue"` || string(fpB["team"]) != `"blue"` || strings.Contains(string(a), "forged") {
		t.Errorf("caller keys: agui %v a2a %v", fpA, fpB)
	}
	if string(msgA) != string(msgB) {
		t.Errorf("messages differ:\n agui %s\n a2a  %s", msgA, msgB)
	}
}
