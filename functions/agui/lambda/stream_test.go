package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// An AG-UI run started through the Function URL adapter (POST
// /agui/{provider}/{name}, a RunAgentInput body, as a caller sends it)
// streams: the first event reaches the caller while the run is still
// going (the provider sends the rest only after the test has read it),
// and the body then carries the whole run as SSE up to RUN_FINISHED.
func TestLambdaRunStreams(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe2, nil)
	p.Register("echo")
	handler := doorOn(t, h)

	// The invocation's deadline only bounds a hang; nothing asserts on time.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	firstRead := make(chan struct{})
	provider := make(chan error, 1)
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		thread := ""
		if f.ThreadID != nil {
			thread = *f.ThreadID
		}
		p.Event(f.RunID, `{"type":"RUN_STARTED","threadId":"`+thread+`","runId":"`+f.RunID+`"}`)
		select {
		case <-firstRead:
		case <-ctx.Done():
			provider <- ctx.Err()
			return
		}
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"echo: hi"}`)
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
		p.Event(f.RunID, `{"type":"RUN_FINISHED","threadId":"`+thread+`","runId":"`+f.RunID+`"}`)
		p.Finish(f.RunID)
		provider <- nil
	}()

	path := "/agui/" + p.Key + "/echo"
	resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: path,
		Headers: map[string]string{"content-type": "application/json", "accept": "text/event-stream"},
		Body: `{"threadId":"new","runId":"r1","messages":[{"id":"m1","role":"user","content":"hi"}],` +
			`"tools":[],"context":[],"state":null,"forwardedProps":{}}`,
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Headers["Content-Type"] != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %v %s", path, resp.StatusCode, resp.Headers, b)
	}
	br := bufio.NewReader(resp.Body)
	var head strings.Builder
	for !strings.Contains(head.String(), `"type":"RUN_STARTED"`) {
		line, err := br.ReadString('\n')
		head.WriteString(line)
		if err != nil {
			t.Fatalf("the stream ended before RUN_STARTED arrived (buffered, not streamed?): %v\n%s", err, head.String())
		}
	}
	close(firstRead)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-provider; err != nil {
		t.Fatalf("provider: %v (the first event never reached the caller while the run was going)", err)
	}
	body := head.String() + string(rest)
	var types []string
	for _, l := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			_, typ, _ := strings.Cut(d, `"type":"`)
			typ, _, _ = strings.Cut(typ, `"`)
			types = append(types, typ)
		}
	}
	want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}
	if strings.Join(types, " ") != strings.Join(want, " ") || !strings.Contains(body, "echo: hi") || !strings.Contains(body, "id: 5\n") {
		t.Fatalf("SSE body: events %v, want %v with ids 1-5\n%s", types, want, body)
	}
}
