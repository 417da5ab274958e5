package a2a_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/nodejs"
)

// reply completes a run with text as the assistant's message.
func reply(p *nodetest.Prov, f wire.RunFrame, text string) {
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"r-`+f.RunID+`","role":"assistant"}`)
	b, _ := json.Marshal(text)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r-`+f.RunID+`","delta":`+string(b)+`}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"r-`+f.RunID+`"}`)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
}

func userText(t *testing.T, f wire.RunFrame) string {
	var in struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil || len(in.Messages) != 1 {
		t.Errorf("run input %s: %v", f.RunInput, err)
		return ""
	}
	return in.Messages[0].Content
}

// The acceptance test with the official A2A JavaScript client
// (@a2a-js/sdk ClientFactory, A2A 1.0 over JSON-RPC) from Node: card
// discovery, a blocking send, a streaming send, get, list, cancel of a
// running task (provider asked; working until the provider finishes, then
// canceled), cancel of a finished task (-32002), an unknown contextId
// refused, and an answer to an input-required task resuming the same task
// id — against a real broker node and the door on loopback.
func TestA2AClientEndToEnd(t *testing.T) {
	node, dir := nodejs.Project(t, "e2e", "@a2a-js/sdk")
	h := nodetest.Start(t, nil)
	echo := h.Connect(0xe1, nil)
	echo.Register("echo")
	asker := h.Connect(0xe2, nil)
	asker.Register("ask")
	srv := startDoor(t, h, nil)

	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	js := nodejs.Start(ctx, t, node, dir, "run.mjs", "FUNDUQ_DOOR="+srv.URL, "FUNDUQ_PROVIDER="+echo.Key, "FUNDUQ_ASKER="+asker.Key)
	finish := make(chan string, 1)
	var report []byte
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(js.Stdout)
		for sc.Scan() {
			line := sc.Text()
			if id, ok := strings.CutPrefix(line, "FINISH "); ok {
				finish <- id
				continue
			}
			report = append(report[:0], line...)
		}
		_, _ = io.Copy(io.Discard, js.Stdout)
	})

	// The echo agent: two answered turns, then a turn it holds until the
	// client has seen it still working after the cancel request.
	for _, want := range []string{"hello door", "stream me"} {
		f := echo.Offer()
		if got := userText(t, f); got != want {
			t.Errorf("offered %q, want %q", got, want)
		}
		echo.Accept(f.RunID)
		reply(echo, f, "echo: "+want)
	}
	held := echo.Offer()
	echo.Accept(held.RunID)
	echo.Event(held.RunID, runStarted(*held.ThreadID, held.RunID))
	var cf wire.Cancel
	echo.Expect(wire.TypeCancel, &cf)
	if cf.RunID != held.RunID {
		t.Fatalf("cancel frame %+v", cf)
	}
	if _, err := io.WriteString(js.Stdin, "ASKED\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-finish:
		if id != held.RunID {
			t.Fatalf("FINISH %s, want %s", id, held.RunID)
		}
		if st := h.Run(held.RunID).Status; st != run.Cancelling {
			t.Fatalf("held run %s before the provider finished", st)
		}
		echo.Finish(held.RunID)
	case <-time.After(guard):
		t.Fatalf("the client did not ask to finish; stderr:\n%s", js.Stderr.String())
	}
	// The asking agent pauses, then answers the same run.
	f := asker.Offer()
	pause(asker, f)
	f2 := asker.Offer()
	if f2.RunID != f.RunID {
		t.Fatalf("the answer was delivered as %s, not the paused %s", f2.RunID, f.RunID)
	}
	asker.Accept(f2.RunID)
	reply(asker, f2, "approved")

	waitErr := js.Cmd.Wait()
	wg.Wait()
	if waitErr != nil {
		t.Fatalf("node run.mjs: %v\n%s", waitErr, js.Stderr.String())
	}
	var rep struct {
		Blocking           struct{ TaskID, ContextID string }
		Streamed           struct{ TaskID string }
		Cancelled          struct{ TaskID string }
		Resumed            struct{ TaskID string }
		UnknownContextCode int
	}
	if err := json.Unmarshal(report, &rep); err != nil {
		t.Fatalf("report %q: %v", report, err)
	}
	t.Logf("client report: %s", report)
	if rep.UnknownContextCode != -32602 {
		t.Errorf("unknown contextId answered %d", rep.UnknownContextCode)
	}
	// The record agrees with what the client saw.
	h.WaitStatus(rep.Blocking.TaskID, run.Completed)
	h.WaitStatus(rep.Streamed.TaskID, run.Completed)
	h.WaitStatus(rep.Cancelled.TaskID, run.Cancelled)
	if r := h.WaitStatus(rep.Resumed.TaskID, run.Completed); r.RunID != f.RunID {
		t.Errorf("resumed %+v", r)
	}
	_ = fmt.Sprint
}
