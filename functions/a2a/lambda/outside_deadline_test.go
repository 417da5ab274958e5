package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/door"
)

// sseItems is the data lines of an SSE body and the id each carried (0
// for none), in order.
func sseItems(body string) (data []string, ids []string) {
	var id string
	for _, l := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(l, "id: "):
			id = strings.TrimPrefix(l, "id: ")
		case strings.HasPrefix(l, "data: "):
			data, ids = append(data, strings.TrimPrefix(l, "data: ")), append(ids, id)
			id = ""
		}
	}
	return data, ids
}

// A message/stream still open when its Lambda invocation nears its end
// (the run goes on: the agent is still working) ends before the function
// is killed with something an A2A client reads: a JSON-RPC error as the
// stream's last item, naming the task and the Last-Event-ID to resume
// from with tasks/resubscribe. Before, it ended with an SSE comment alone,
// which A2A clients skip: the stream just closed, read as the task's end
// with the task still "working" (the same silent end design.md §Doors
// under storage faults refuses). The resubscribe it names then streams
// the rest to the task's final status.
func TestOutsideStreamEndsBeforeTheLambdaDeadlineSaysHowToResume(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe4, nil)
	p.Register("echo")
	handler := doorOn(t, h)
	path := "/a2a/" + p.Key + "/echo"
	// open is one Lambda invocation ending at deadline (the door's input,
	// not an assertion: it ends its stream door.DefaultDeadlineMargin
	// before): its status and a reader at its body.
	open := func(deadline time.Time, body string, hdr map[string]string) (int, *bufio.Reader) {
		t.Helper()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		t.Cleanup(cancel)
		h := map[string]string{"content-type": "application/json", "accept": "text/event-stream"}
		for k, v := range hdr {
			h[k] = v
		}
		resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: path,
			Body: body, Headers: h,
			RequestContext: events.APIGatewayProxyRequestContext{DomainName: "api.example", Stage: "v1", HTTPMethod: "POST", Path: "/v1" + path}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, bufio.NewReader(resp.Body)
	}
	rest := func(br *bufio.Reader) string {
		t.Helper()
		b, err := io.ReadAll(br)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// The agent takes the run up and says it started, then keeps working
	// past the invocation's end.
	offered := make(chan string, 1)
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
		offered <- f.RunID + " " + *f.ThreadID
	}()
	code, br := open(time.Now().Add(door.DefaultDeadlineMargin+3*time.Second),
		`{"jsonrpc":"2.0","id":"s1","method":"message/stream","params":{"message":{"kind":"message","messageId":"m-deadline","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`, nil)
	body := rest(br)
	runID, threadID, _ := strings.Cut(<-offered, " ")
	data, ids := sseItems(body)
	if code != 200 || len(data) < 2 {
		t.Fatalf("message/stream: %d\n%s", code, body)
	}
	var last struct {
		ID     string          `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int
			Data struct {
				Reason      string
				TaskID      string `json:"taskId"`
				LastEventID string `json:"lastEventId"`
			}
		}
	}
	if err := json.Unmarshal([]byte(data[len(data)-1]), &last); err != nil {
		t.Fatalf("last item %q: %v", data[len(data)-1], err)
	}
	lastID := ""
	for _, id := range ids {
		if id != "" {
			lastID = id
		}
	}
	if last.ID != "s1" || last.Error == nil || last.Error.Code != -32048 || last.Error.Data.Reason != "stream_ended" ||
		last.Error.Data.TaskID != runID || last.Error.Data.LastEventID != lastID || last.Result != nil {
		t.Fatalf("the stream's last item %s, want a JSON-RPC error -32048 (stream_ended) naming task %s and Last-Event-ID %q\n%s",
			data[len(data)-1], runID, lastID, body)
	}

	// The resume it names, while the task goes on: the task as it stands,
	// then (the agent finishing now) the rest of the run to its final
	// status.
	code, br = open(time.Now().Add(time.Minute),
		fmt.Sprintf(`{"jsonrpc":"2.0","id":"r1","method":"tasks/resubscribe","params":{"id":%q}}`, runID),
		map[string]string{"Last-Event-ID": last.Error.Data.LastEventID})
	first, err := br.ReadString('\n')
	if code != 200 || err != nil || !strings.Contains(first, `"kind":"task"`) {
		t.Fatalf("tasks/resubscribe from Last-Event-ID %s: %d %q %v", last.Error.Data.LastEventID, code, first, err)
	}
	p.Complete(runID, threadID)
	body = first + rest(br)
	h.WaitStatus(runID, run.Completed)
	data, _ = sseItems(body)
	if len(data) == 0 || !strings.Contains(data[len(data)-1], `"state":"completed"`) ||
		!strings.Contains(data[len(data)-1], `"final":true`) {
		t.Fatalf("tasks/resubscribe from Last-Event-ID %s: the stream did not end with the final status\n%s", last.Error.Data.LastEventID, body)
	}
}
