package agui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/nodejs"
	"github.com/funduq/funduq-go/internal/seeds"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// conformanceSeeds are the seeds of the conformance runs:
// FUNDUQ_CONFORMANCE_SEEDS ("1,2,5-9") or a small default set.
func conformanceSeeds(t *testing.T) []uint64 {
	spec := os.Getenv("FUNDUQ_CONFORMANCE_SEEDS")
	if spec == "" {
		spec = "1-6"
	}
	list, err := seeds.Parse(spec)
	if err != nil {
		t.Fatalf("FUNDUQ_CONFORMANCE_SEEDS: %v", err)
	}
	return list
}

// conformanceReport is what e2e/conformance.mjs prints.
type conformanceReport struct {
	CoreRefuses []struct {
		I     int
		Issue string
	}
	Error         *string
	Types         []string
	StreamRefuses []struct {
		Event string
		Issue string
	}
}

// TestOutsideSeededEventsConformToAGUICore: a raw-wire provider emits a
// seeded, well-ordered run of AG-UI events of every type @ag-ui/core 1.0
// defines, each optional field absent, present or null (at the top and
// nested in messages, tool calls, content parts, outcomes, usage, patch
// operations and inputs), with unicode edge cases and large numbers. What
// funduq relays must parse in the official client (HttpAgent, its default
// enforcement and verification) and in @ag-ui/core's event schema, every
// event of the caller's stream; an event funduq refuses must be answered
// to the provider with a typed error and be one @ag-ui/core refuses too
// (or one D18 says PostgreSQL cannot store). FUNDUQ_CONFORMANCE_SEEDS
// picks the seeds.
func TestOutsideSeededEventsConformToAGUICore(t *testing.T) {
	node, dir := nodejs.Project(t, "e2e", "@ag-ui/client")
	h := nodetest.Start(t, nil)
	p := h.Connect(0xc0, nil)
	p.Register("conf")
	srv := startDoor(t, h, nil)
	for _, seed := range conformanceSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			seededConformance(t, node, dir, srv.URL, p, seed)
			if t.Failed() {
				t.Logf("CONFORMANCE FAILED seed %d; rerun with FUNDUQ_CONFORMANCE_SEEDS=%d", seed, seed)
			}
		})
	}
}

func seededConformance(t *testing.T, node, dir, door string, p *nodetest.Prov, seed uint64) {
	g := &evGen{rng: rand.New(rand.NewPCG(seed, 0xc0f0))}
	body := g.run()
	file := filepath.Join(t.TempDir(), "events.json")
	// The node side needs the events before the run's ids are known; the
	// provider's RUN_STARTED and RUN_FINISHED get them below.
	all := append([]string{`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`}, body...)
	if err := os.WriteFile(file, []byte("["+strings.Join(all, ",")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	cmd := exec.CommandContext(ctx, node, "conformance.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FUNDUQ_DOOR="+door, "FUNDUQ_PROVIDER="+p.Key, "FUNDUQ_AGENT=conf",
		"FUNDUQ_EVENTS="+file, "NODE_ENV=test", "SUPPRESS_TRANSFORMATION_WARNINGS=true")
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := p.Offer()
	p.Accept(f.RunID)
	// Each event waits for a barrier, so a refusal names the event before
	// it. A malformed event's refusal may be written after the barrier
	// behind it was answered (seen here): the next event then learns the
	// run has ended, before or after the refusal that ended it.
	const ended = "event refused: the run has ended"
	refusedAt, refusal := -1, ""
	for i, ev := range all {
		ev = strings.ReplaceAll(ev, `"threadId":"t","runId":"r"`, fmt.Sprintf(`"threadId":%q,"runId":%q`, *f.ThreadID, f.RunID))
		p.Event(f.RunID, ev)
		for _, fr := range p.Barrier() {
			var e wire.Error
			if typ, _ := wire.PeekType(fr); typ != wire.TypeError || json.Unmarshal(fr, &e) != nil || e.RunID != f.RunID {
				t.Fatalf("unexpected frame %s", fr)
			}
			switch {
			case e.Message == ended:
				refusedAt = i - 1
			case refusal == "":
				refusal = e.Message
				if refusedAt < 0 {
					refusedAt = i
				}
			}
		}
		if refusedAt >= 0 {
			break
		}
	}
	for refusedAt >= 0 && refusal == "" {
		var e wire.Error
		if typ, fr := p.Next(); typ != wire.TypeError || json.Unmarshal(fr, &e) != nil || e.RunID != f.RunID {
			t.Fatalf("unexpected frame %s", fr)
		}
		if e.Message != ended {
			refusal = e.Message
		}
	}
	if refusedAt < 0 {
		p.Finish(f.RunID)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node conformance.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	var rep conformanceReport
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	coreRefused := map[int]string{}
	for _, r := range rep.CoreRefuses {
		coreRefused[r.I] = r.Issue
	}
	if rep.Error != nil {
		t.Errorf("the official client refused what funduq relayed: %.300s", deref(rep.Error))
	}
	for _, r := range rep.StreamRefuses {
		if !legacyShape(r.Event) {
			t.Errorf("@ag-ui/core refuses the caller's event (%s): %.400s", r.Issue, r.Event)
		}
	}
	if refusedAt >= 0 {
		if !strings.HasPrefix(refusal, "event refused: ") {
			t.Errorf("refusal of event %d is not typed: %q", refusedAt, refusal)
		}
		if _, ok := coreRefused[refusedAt]; !ok && !strings.Contains(refusal, "cannot store") {
			t.Errorf("funduq refused event %d, which @ag-ui/core accepts: %s\n%s\nevents before it: %s", refusedAt, refusal, all[refusedAt], strings.Join(all[:refusedAt], "\n"))
		}
	}
}

// legacyShape reports whether ev is one of evGen.legacy's shapes, which
// AG-UI 1.0's schema does not define and funduq relays as sent: the
// official client drops or strips them (TestOutsideAGUIClientTakesLegacyShapes).
func legacyShape(ev string) bool {
	for _, mark := range []string{`"type":"THINKING_`, `"type":"FUTURE_EVENT"`, `"type":"binary"`, `"role":"critic"`} {
		if strings.Contains(ev, mark) {
			return true
		}
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// evGen generates one run's events. Every choice comes from rng, so a
// seed names its run.
type evGen struct {
	rng *rand.Rand
	n   int
	// sub is the subagentRunId of the block being generated ("" none, or
	// "null" for a null one): a block stays in one subagent's lane, as
	// the official client's verification requires.
	sub string
}

func (g *evGen) id(prefix string) string {
	g.n++
	return fmt.Sprintf("%s%d%s", prefix, g.n, g.pick("", "", "é", "👋🏽", "\u2028", " ", "/"))
}

func (g *evGen) pick(vs ...string) string { return vs[g.rng.IntN(len(vs))] }

func (g *evGen) chance(n int) bool { return g.rng.IntN(n) == 0 }

// str is a string with unicode edge cases.
func (g *evGen) str() string {
	return g.pick("", "plain", "héllo 👋🏽", "日本語", "\u2028\u2029", `"q" \ /`, "e\u0301", "\u200b\ufeff", "\u202eRTL",
		"\uffff", "\U0010FFFF", "𝕏𝕐", "<script>&amp;", strings.Repeat("ab", 300), "tab\tnl\n")
}

// number is a JSON number, small or large.
func (g *evGen) number() json.RawMessage {
	return json.RawMessage(g.pick("0", "-1", "1.5", "42", "1e3", "9007199254740991", "9007199254740993",
		"123456789012345678901234567890", "1e300", "-0", "0.1e-5"))
}

// timestamp is an event's timestamp: usually milliseconds, sometimes a
// number @ag-ui/core refuses (not an integer, beyond 2^53).
func (g *evGen) timestamp() json.RawMessage {
	if g.chance(3) {
		return json.RawMessage(g.pick("1.5", "9007199254740993", "1e300", "-1e20"))
	}
	return json.RawMessage(g.pick("1733440000000", "0", "1", "-1"))
}

// anyValue is any JSON value, nulls nested inside.
func (g *evGen) anyValue(depth int) any {
	k := g.rng.IntN(7)
	if depth > 2 && k >= 5 {
		k = g.rng.IntN(5)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return g.rng.IntN(2) == 0
	case 2:
		return g.number()
	case 3, 4:
		return g.str()
	case 5:
		a := []any{}
		for i := g.rng.IntN(4); i > 0; i-- {
			a = append(a, g.anyValue(depth+1))
		}
		return a
	}
	m := map[string]any{}
	for i := g.rng.IntN(4); i > 0; i-- {
		m[g.str()] = g.anyValue(depth + 1)
	}
	return m
}

// obj is a JSON object with its optional members set by opt.
type obj map[string]any

// opt sets key absent, to v(), or to null.
func (g *evGen) opt(o obj, key string, v func() any) {
	switch g.rng.IntN(4) {
	case 0, 1:
		o[key] = v()
	case 2:
		o[key] = nil
	}
}

func (g *evGen) s(v string) func() any { return func() any { return v } }

// common adds the members every event may carry.
func (g *evGen) common(o obj, attributable bool) obj {
	g.opt(o, "timestamp", func() any { return g.timestamp() })
	g.opt(o, "rawEvent", func() any { return g.anyValue(0) })
	g.opt(o, "metadata", func() any { return map[string]any{"k": g.anyValue(1)} })
	switch {
	case !attributable || g.sub == "":
	case g.sub == "null":
		o["subagentRunId"] = nil
	default:
		o["subagentRunId"] = g.sub
	}
	return o
}

func (g *evGen) enc(o obj) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(map[string]any(o)); err != nil {
		panic(err)
	}
	return strings.TrimSpace(b.String())
}

func (g *evGen) ev(typ string, o obj) string {
	o["type"] = typ
	return g.enc(g.common(o, true))
}

// contentPart is one part of a message's content.
func (g *evGen) contentPart() any {
	switch g.rng.IntN(3) {
	case 0:
		o := obj{"type": "text", "text": g.str()}
		g.opt(o, "id", func() any { return g.id("p") })
		g.opt(o, "metadata", func() any { return g.anyValue(1) })
		return o
	case 1:
		src := obj{"type": "url", "value": "https://example.com/a.png"}
		g.opt(src, "mimeType", g.s("image/png"))
		o := obj{"type": g.pick("image", "audio", "video", "document"), "source": src}
		g.opt(o, "id", func() any { return g.id("p") })
		return o
	}
	src := obj{"type": "data", "value": "aGk=", "mimeType": "text/plain"}
	return obj{"type": "document", "source": src}
}

func (g *evGen) content() any {
	if g.chance(2) {
		return g.str()
	}
	a := []any{}
	for i := 1 + g.rng.IntN(3); i > 0; i-- {
		a = append(a, g.contentPart())
	}
	return a
}

func (g *evGen) toolCall() any {
	fn := obj{"name": "lookup", "arguments": `{"q":"☕","n":null}`}
	o := obj{"id": g.id("c"), "type": "function", "function": fn}
	g.opt(o, "encryptedValue", g.s("enc"))
	g.opt(o, "metadata", func() any { return map[string]any{"x": nil} })
	return o
}

// message is one AG-UI message of a random role.
func (g *evGen) message() any {
	o := obj{"id": g.id("m")}
	g.opt(o, "metadata", func() any { return map[string]any{"n": nil} })
	switch g.rng.IntN(7) {
	case 0:
		o["role"] = g.pick("developer", "system")
		o["content"] = g.str()
		g.opt(o, "name", func() any { return g.str() })
		g.opt(o, "encryptedValue", g.s("enc"))
	case 1, 2:
		o["role"] = "assistant"
		g.opt(o, "content", func() any { return g.str() })
		g.opt(o, "name", func() any { return g.str() })
		g.opt(o, "toolCalls", func() any {
			a := []any{}
			for i := g.rng.IntN(3); i > 0; i-- {
				a = append(a, g.toolCall())
			}
			return a
		})
	case 3:
		o["role"] = "user"
		o["content"] = g.content()
		g.opt(o, "name", func() any { return g.str() })
	case 4:
		o["role"] = "tool"
		o["content"] = g.content()
		o["toolCallId"] = g.id("c")
		g.opt(o, "error", func() any { return g.str() })
	case 5:
		o["role"] = "activity"
		o["activityType"] = "plan"
		o["content"] = map[string]any{"steps": []any{g.anyValue(1), nil}}
	default:
		o["role"] = "reasoning"
		o["content"] = g.str()
		g.opt(o, "encryptedValue", g.s("enc"))
	}
	return o
}

// patch is a JSON Patch that applies to state, which holds "/a".
func (g *evGen) patch() []any {
	var ops []any
	for i := 1 + g.rng.IntN(3); i > 0; i-- {
		switch g.rng.IntN(5) {
		case 0:
			ops = append(ops, obj{"op": "replace", "path": "/a", "value": g.anyValue(0)})
		case 1:
			ops = append(ops, obj{"op": "add", "path": "/" + g.id("k"), "value": g.anyValue(0)})
		case 2:
			ops = append(ops, obj{"op": "test", "path": "/a", "value": nil}, obj{"op": "replace", "path": "/a", "value": nil})
		case 3:
			ops = append(ops, obj{"op": "copy", "from": "/a", "path": "/b"})
		default:
			// An operation @ag-ui/core refuses: no path, or not an object.
			ops = append(ops, []any{obj{"op": "add", "value": 1}, nil, "x", obj{"op": "frob", "path": "/a"}}[g.rng.IntN(4)])
		}
	}
	return ops
}

func (g *evGen) usage() any {
	a := []any{}
	for i := g.rng.IntN(3); i > 0; i-- {
		u := obj{}
		g.opt(u, "model", g.s("m-1"))
		g.opt(u, "inputTokens", func() any { return json.RawMessage(g.pick("10", "0", "1.5", "-1", "9007199254740993")) })
		g.opt(u, "outputTokens", func() any { return json.RawMessage("3") })
		a = append(a, u)
	}
	return a
}

// block is a few events that belong together, well ordered.
func (g *evGen) block() []string {
	g.sub = ""
	if g.chance(3) {
		g.sub = g.pick("null", g.id("sub"))
	}
	switch g.rng.IntN(15) {
	case 14:
		return g.legacy()
	case 0:
		m := g.id("m")
		start := obj{"messageId": m}
		g.opt(start, "role", func() any { return g.pick("assistant", "user", "system", "developer") })
		g.opt(start, "name", func() any { return g.str() })
		out := []string{g.ev("TEXT_MESSAGE_START", start)}
		for i := g.rng.IntN(3); i > 0; i-- {
			out = append(out, g.ev("TEXT_MESSAGE_CONTENT", obj{"messageId": m, "delta": g.str()}))
		}
		return append(out, g.ev("TEXT_MESSAGE_END", obj{"messageId": m}))
	case 1:
		c := g.id("c")
		start := obj{"toolCallId": c, "toolCallName": g.str()}
		g.opt(start, "parentMessageId", func() any { return g.id("m") })
		res := obj{"messageId": g.id("t"), "toolCallId": c, "content": g.content()}
		g.opt(res, "role", g.s("tool"))
		return []string{g.ev("TOOL_CALL_START", start),
			g.ev("TOOL_CALL_ARGS", obj{"toolCallId": c, "delta": `{"q":null,"a":[null,{"b":null}]}`}),
			g.ev("TOOL_CALL_END", obj{"toolCallId": c}),
			g.ev("TOOL_CALL_RESULT", res)}
	case 2:
		return []string{g.ev("STATE_SNAPSHOT", obj{"snapshot": map[string]any{"a": g.anyValue(0), "n": nil}}),
			g.ev("STATE_DELTA", obj{"delta": g.patch()})}
	case 3:
		var ms []any
		for i := g.rng.IntN(4); i > 0; i-- {
			ms = append(ms, g.message())
		}
		if ms == nil {
			ms = []any{}
		}
		o := obj{"messages": ms, "type": "MESSAGES_SNAPSHOT"}
		return []string{g.enc(g.common(o, false))}
	case 4:
		m := g.id("act")
		snap := obj{"messageId": m, "activityType": "plan", "content": map[string]any{"a": g.anyValue(0)}}
		g.opt(snap, "replace", func() any { return g.chance(2) })
		return []string{g.ev("ACTIVITY_SNAPSHOT", snap),
			g.ev("ACTIVITY_DELTA", obj{"messageId": m, "activityType": "plan", "patch": g.patch()})}
	case 5:
		raw := obj{"event": g.anyValue(0)}
		g.opt(raw, "source", func() any { return g.str() })
		return []string{g.ev("RAW", raw), g.ev("CUSTOM", obj{"name": g.str(), "value": g.anyValue(0)})}
	case 6:
		s := g.str()
		return []string{g.ev("STEP_STARTED", obj{"stepName": s}), g.ev("STEP_FINISHED", obj{"stepName": s})}
	case 7:
		r, m := g.id("r"), g.id("rm")
		return []string{g.ev("REASONING_START", obj{"messageId": r}),
			g.ev("REASONING_MESSAGE_START", obj{"messageId": m, "role": "reasoning"}),
			g.ev("REASONING_MESSAGE_CONTENT", obj{"messageId": m, "delta": g.str()}),
			g.ev("REASONING_MESSAGE_END", obj{"messageId": m}),
			g.ev("REASONING_END", obj{"messageId": r})}
	case 8:
		m := g.id("m")
		first := obj{"messageId": m, "delta": g.str()}
		g.opt(first, "role", g.s("assistant"))
		g.opt(first, "name", func() any { return g.str() })
		next := obj{"messageId": m}
		g.opt(next, "delta", func() any { return g.str() })
		return []string{g.ev("TEXT_MESSAGE_CHUNK", first), g.ev("TEXT_MESSAGE_CHUNK", next)}
	case 9:
		c := g.id("c")
		first := obj{"toolCallId": c, "toolCallName": "lookup"}
		g.opt(first, "parentMessageId", func() any { return g.id("m") })
		g.opt(first, "delta", g.s("{}"))
		return []string{g.ev("TOOL_CALL_CHUNK", first)}
	case 10:
		m := g.id("rm")
		next := obj{"messageId": m}
		g.opt(next, "delta", func() any { return g.str() })
		return []string{g.ev("REASONING_MESSAGE_CHUNK", obj{"messageId": m, "delta": "x"}), g.ev("REASONING_MESSAGE_CHUNK", next)}
	case 11:
		o := obj{"subtype": g.pick("tool-call", "message"), "entityId": g.id("e"), "encryptedValue": g.str()}
		return []string{g.ev("REASONING_ENCRYPTED_VALUE", o)}
	case 12:
		sub := g.id("sub")
		start := obj{"subagentRunId": sub, "name": g.str(), "type": "SUBAGENT_STARTED"}
		g.opt(start, "description", func() any { return g.str() })
		g.opt(start, "parentToolCallId", func() any { return g.id("c") })
		fin := obj{"subagentRunId": sub, "type": "SUBAGENT_FINISHED"}
		g.opt(fin, "result", func() any { return g.anyValue(0) })
		g.opt(fin, "outcome", func() any {
			o := obj{"type": g.pick("success", "suspended")}
			g.opt(o, "interruptIds", func() any { return []any{"i1"} })
			return o
		})
		out := []string{g.enc(g.common(start, false))}
		if g.chance(3) { // an error ends the subagent as its finish does
			return append(out, g.enc(g.common(obj{"subagentRunId": sub, "type": "SUBAGENT_ERROR", "message": g.str()}, false)))
		}
		return append(out, g.enc(g.common(fin, false)))
	}
	m := g.id("m")
	return []string{g.ev("TEXT_MESSAGE_START", obj{"messageId": m, "role": "assistant"}),
		g.ev("TEXT_MESSAGE_CONTENT", obj{"messageId": m, "delta": g.str()}),
		g.ev("TEXT_MESSAGE_END", obj{"messageId": m})}
}

// legacy is one event of a shape AG-UI 1.0 does not define but older or
// newer SDKs send: the THINKING_* family, a type from a newer AG-UI, a
// reasoning message with the assistant role, a 0.x binary content part, a
// message role or a run outcome this version does not know.
func (g *evGen) legacy() []string {
	switch g.rng.IntN(6) {
	case 0:
		return []string{g.ev("THINKING_START", obj{"title": g.str()}),
			g.ev("THINKING_TEXT_MESSAGE_START", obj{}),
			g.ev("THINKING_TEXT_MESSAGE_CONTENT", obj{"delta": g.str()}),
			g.ev("THINKING_TEXT_MESSAGE_END", obj{}),
			g.ev("THINKING_END", obj{})}
	case 1:
		return []string{g.ev("FUTURE_EVENT", obj{"x": g.anyValue(0), "n": nil})}
	case 2:
		m := g.id("rm")
		return []string{g.ev("REASONING_MESSAGE_START", obj{"messageId": m, "role": "assistant"}),
			g.ev("REASONING_MESSAGE_END", obj{"messageId": m})}
	case 3:
		part := obj{"type": "binary", "mimeType": "image/png", "data": "aGk="}
		return []string{g.ev("TOOL_CALL_RESULT", obj{"messageId": g.id("t"), "toolCallId": g.id("c"), "content": []any{part}})}
	case 4:
		m := obj{"id": g.id("m"), "role": "critic", "content": "c"}
		return []string{g.enc(g.common(obj{"type": "MESSAGES_SNAPSHOT", "messages": []any{m}}, false))}
	}
	// An outcome this version does not know ends the run early.
	return []string{g.enc(g.common(obj{"type": "CUSTOM", "name": "outcome", "value": obj{"type": "weird"}}, true))}
}

// run is one run's events after its RUN_STARTED: blocks, then the end.
func (g *evGen) run() []string {
	var out []string
	for i := 2 + g.rng.IntN(6); i > 0; i-- {
		out = append(out, g.block()...)
	}
	if g.chance(6) {
		o := obj{"type": "RUN_ERROR", "message": g.str()}
		g.opt(o, "code", func() any { return g.str() })
		g.opt(o, "usage", func() any { return g.usage() })
		return append(out, g.enc(g.common(o, false)))
	}
	o := obj{"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}
	g.opt(o, "result", func() any { return g.anyValue(0) })
	g.opt(o, "usage", func() any { return g.usage() })
	g.opt(o, "outcome", func() any {
		oc := obj{"type": "success"}
		g.opt(oc, "pendingToolCallIds", func() any { return []any{} })
		return oc
	})
	// RUN_FINISHED is last, with the ids written in a fixed order so the
	// provider can put the run's own in.
	enc := g.enc(g.common(o, false))
	enc = strings.Replace(enc, `"runId":"r",`, "", 1)
	enc = strings.Replace(enc, `"threadId":"t"`, `"threadId":"t","runId":"r"`, 1)
	return append(out, enc)
}

// TestOutsideAGUIClientTakesLegacyShapes: shapes AG-UI 1.0 does not define
// but older and newer SDKs send — the THINKING_* family, a newer type, a
// reasoning message with the assistant role (a Python SDK release), a 0.x
// binary content part, a message role this version does not know — are
// relayed as sent (design.md, AG-UI versions), and the official 1.0 client
// takes the run: it drops an unknown type, and strips what it does not
// know, with a warning, instead of refusing the stream.
func TestOutsideAGUIClientTakesLegacyShapes(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xc1, nil)
	p.Register("legacy")
	evs := []string{
		`{"type":"THINKING_START","title":"t"}`,
		`{"type":"THINKING_TEXT_MESSAGE_START"}`,
		`{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"hm"}`,
		`{"type":"THINKING_TEXT_MESSAGE_END"}`,
		`{"type":"THINKING_END"}`,
		`{"type":"FUTURE_EVENT","x":{"y":null}}`,
		`{"type":"REASONING_MESSAGE_START","messageId":"rm","role":"assistant"}`,
		`{"type":"REASONING_MESSAGE_CONTENT","messageId":"rm","delta":"why"}`,
		`{"type":"REASONING_MESSAGE_END","messageId":"rm"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"t1","toolCallId":"c1","content":[{"type":"binary","mimeType":"image/png","data":"aGk="}]}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"go"},{"id":"x1","role":"critic","content":"c"}]}`,
	}
	rep := aguiClientRun(t, h, p, "legacy", playsEvents(p, evs))
	if rep.Error != nil {
		t.Fatalf("the official client refused the stream: %s (applied %v)", *rep.Error, rep.Types)
	}
	if n := len(rep.Types); n == 0 || rep.Types[n-1] != "RUN_FINISHED" {
		t.Errorf("client applied %v", rep.Types)
	}
}

// TestOutsideRefusalComesBeforeTheQueryAnswer: a queryResult is a barrier
// for "funduq has my reports" (design.md §The provider wire): a malformed
// event's refusal must reach the provider before the answer to a query it
// sent after the event, or a provider taking the answer as the barrier
// believes the event was taken. Seen in the seeded conformance runs: the
// event's backlog place was given back before its refusal was written.
func TestOutsideRefusalComesBeforeTheQueryAnswer(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xc2, nil)
	p.Register("order")
	srv := startDoor(t, h, nil)
	for i := 0; i < 20; i++ {
		s := openStream(t, "POST", aguiURL(srv, p.Key, "order"), input("t", fmt.Sprintf("r%d", i), ""), nil)
		f := p.Offer()
		p.Accept(f.RunID)
		p.Event(f.RunID, runStartedFor(f))
		if i%2 == 1 {
			p.Barrier() // the malformed event alone in its batch, or behind one
		}
		p.Event(f.RunID, `{"type":"STEP_STARTED","stepName":"s","timestamp":1.5}`)
		got := p.Barrier()
		if len(got) != 1 {
			t.Fatalf("run %d: before the query's answer came %d frames, want the refusal", i, len(got))
		}
		var e wire.Error
		if typ, _ := wire.PeekType(got[0]); typ != wire.TypeError || json.Unmarshal(got[0], &e) != nil || e.RunID != f.RunID ||
			!strings.HasPrefix(e.Message, "event refused: provider sent a malformed AG-UI event") {
			t.Fatalf("run %d: frame %s, want the event's refusal", i, got[0])
		}
		s.rest()
	}
}
