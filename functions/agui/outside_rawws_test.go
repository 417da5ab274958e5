package agui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// wsProv is a provider written here from the wire alone (ticket, hello,
// welcome over gorilla/websocket), for what nodetest.Prov cannot send: a
// frame of another WebSocket message type.
type wsProv struct {
	t  *testing.T
	ws *websocket.Conn
}

func dialProv(t *testing.T, h *nodetest.Harness, seed byte) *wsProv {
	t.Helper()
	s := signer(t, seed)
	resp, err := http.Post(h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+s.PublicKeyHex()+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var tr wire.TicketResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	p := &wsProv{t: t, ws: ws}
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	p.send(websocket.TextMessage, wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: s.PublicKeyHex(), Ticket: tr.Ticket,
		Nonce: nonce, Proof: s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))})
	var w wire.Welcome
	p.expect(wire.TypeWelcome, &w)
	return p
}

func (p *wsProv) send(kind int, v any) {
	p.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.ws.WriteMessage(kind, b); err != nil {
		p.t.Fatal(err)
	}
}

// expect reads the next frame, of type typ.
func (p *wsProv) expect(typ string, into any) {
	p.t.Helper()
	_ = p.ws.SetReadDeadline(time.Now().Add(guard))
	_, b, err := p.ws.ReadMessage()
	if err != nil {
		p.t.Fatalf("waiting for %s: %v", typ, err)
	}
	if got, _ := wire.PeekType(b); got != typ {
		p.t.Fatalf("frame %s, want %s", b, typ)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *wsProv) event(kind int, runID, ev string) {
	p.send(kind, wire.Event{Type: wire.TypeEvent, RunID: runID, Event: json.RawMessage(ev)})
}

// An event frame sent as a binary WebSocket message (some libraries send
// bytes that way) is a defect of the frame, not of the event it carries:
// it is refused naming the run (D15) and the run goes on, where failing
// it as a malformed event (D18) would blame the agent's output and end
// the caller's run. Sent again as text, the same event is taken.
func TestOutsideBinaryFrameIsRefusedNotFatal(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := dialProv(t, h, 0xe1)
	p.send(websocket.TextMessage, wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo"}}})
	p.expect(wire.TypeRegistered, nil)
	s := openStream(t, "POST", aguiURL(startDoor(t, h, nil), signer(t, 0xe1).PublicKeyHex(), "echo"), input("t", "r", ""), nil)
	var f wire.RunFrame
	p.expect(wire.TypeRun, &f)
	p.send(websocket.TextMessage, wire.Ack{Type: wire.TypeAck, RunID: f.RunID})
	p.event(websocket.TextMessage, f.RunID, runStartedFor(f))
	chunk := `{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","role":"assistant","delta":"hi"}`
	p.event(websocket.BinaryMessage, f.RunID, chunk)
	var e wire.Error
	p.expect(wire.TypeError, &e)
	if e.RunID != f.RunID {
		t.Fatalf("error frame %+v, want one naming %s", e, f.RunID)
	}
	p.event(websocket.TextMessage, f.RunID, chunk)
	p.event(websocket.TextMessage, f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.send(websocket.TextMessage, wire.Finish{Type: wire.TypeFinish, RunID: f.RunID})
	if got := typesOf(t, s.rest()); !slices.Equal(got, []string{"RUN_STARTED", "TEXT_MESSAGE_CHUNK", "RUN_FINISHED"}) {
		t.Fatalf("the caller saw %v", got)
	}
	if r := h.WaitStatus(f.RunID, run.Completed); r.FailureReason != "" {
		t.Fatalf("failure reason %q", r.FailureReason)
	}
}
