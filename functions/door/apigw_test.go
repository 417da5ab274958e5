package door_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/lambdatest"
)

func proxyEvent(method, path, body string) *events.APIGatewayProxyRequest {
	return &events.APIGatewayProxyRequest{HTTPMethod: method, Path: path, Body: body,
		Resource:       "/agui/{proxy+}",
		Headers:        map[string]string{"Content-Type": "application/json"},
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "api.example", Stage: "v1", HTTPMethod: method, Path: "/v1" + path}}
}

// serve runs the wrapped handler and returns the prelude and a reader at
// the body.
func serve(t *testing.T, ctx context.Context, h http.Handler, ev *events.APIGatewayProxyRequest) (lambdatest.Prelude, *bufio.Reader) {
	t.Helper()
	resp, err := door.WrapAPIGateway(h, nil)(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentType() != "application/vnd.awslambda.http-integration-response" {
		t.Fatalf("content type %q", resp.ContentType())
	}
	br := bufio.NewReader(resp)
	p, err := lambdatest.ReadPrelude(br)
	if err != nil {
		t.Fatal(err)
	}
	return p, br
}

// The REST proxy event becomes the request a door would get from net/http.
func TestAPIGatewayRequest(t *testing.T) {
	key := strings.Repeat("ab", 32)
	ev := proxyEvent("POST", "/agui/p/n", base64.StdEncoding.EncodeToString([]byte("{\"a\":1}\x00")))
	ev.IsBase64Encoded = true
	ev.MultiValueHeaders = map[string][]string{"Accept": {"text/event-stream"}, "X-Two": {"1", "2"},
		door.AuthorizerKeyField: {strings.Repeat("cd", 32)}, "X-Funduq-Authenticated-Key": {strings.Repeat("cd", 32)}}
	ev.MultiValueHeaders["X-Forwarded-Prefix"] = []string{"/evil"}
	ev.MultiValueQueryStringParameters = map[string][]string{"after": {"3"}, "k": {"a b", "c"}}
	ev.RequestContext.Identity.SourceIP = "203.0.113.9"
	ev.RequestContext.Authorizer = map[string]any{"principalId": key, door.AuthorizerKeyField: key}
	r, body, err := door.NewAPIGatewayRequest(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	if r.Method != "POST" || r.URL.Path != "/agui/p/n" || r.Host != "api.example" || r.RemoteAddr != "203.0.113.9" ||
		r.URL.Query().Get("after") != "3" || fmt.Sprint(r.URL.Query()["k"]) != "[a b c]" ||
		r.Header.Get("Accept") != "text/event-stream" || fmt.Sprint(r.Header.Values("X-Two")) != "[1 2]" ||
		string(got) != "{\"a\":1}\x00" || string(body) != string(got) || r.ContentLength != int64(len(got)) {
		t.Fatalf("request %s %s host %q remote %q header %v body %q", r.Method, r.URL, r.Host, r.RemoteAddr, r.Header, got)
	}
	if r.Header.Get("X-Forwarded-Prefix") != "/v1" || r.Header.Get("X-Forwarded-Host") != "api.example" ||
		r.Header.Get("X-Forwarded-Proto") != "https" {
		t.Fatalf("forwarded headers %v", r.Header)
	}
	if k := door.AuthenticatedKey(r); k != key {
		t.Fatalf("seat %q, want the authorizer's key", k)
	}
	if ev2, ok := door.APIGatewayRequestFromContext(r.Context()); !ok || ev2 != ev {
		t.Fatal("event not on the context")
	}
	// Without an authorizer no header fills the seat, whatever it claims.
	ev.RequestContext.Authorizer = nil
	r, _, _ = door.NewAPIGatewayRequest(context.Background(), ev)
	if k := door.AuthenticatedKey(r); k != "" {
		t.Fatalf("seat %q from headers", k)
	}
	// An authorizer context that is not a key fills nothing.
	ev.RequestContext.Authorizer = map[string]any{door.AuthorizerKeyField: "not-a-key"}
	r, _, _ = door.NewAPIGatewayRequest(context.Background(), ev)
	if k := door.AuthenticatedKey(r); k != "" {
		t.Fatalf("seat %q", k)
	}
	// Single-valued maps are read when the multi-value ones are absent.
	ev = proxyEvent("GET", "/runs/r/events", "")
	ev.QueryStringParameters = map[string]string{"x": "y"}
	r, _, _ = door.NewAPIGatewayRequest(context.Background(), ev)
	if r.URL.Query().Get("x") != "y" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s %v", r.URL, r.Header)
	}
	ev.IsBase64Encoded, ev.Body = true, "%%%"
	if _, _, err := door.NewAPIGatewayRequest(context.Background(), ev); err == nil {
		t.Fatal("bad base64 accepted")
	}
}

// The streamed answer is the JSON metadata, the 8 NUL bytes, then the
// body; each flushed SSE event reaches the reader while the handler is
// still running (the handler writes the next event only after the test has
// read the previous one: without the flush this would never end), and the
// handler sees the invocation's deadline.
func TestAPIGatewayStreamsEachFlush(t *testing.T) {
	deadline := time.Now().Add(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	read := make(chan int)
	var seenDeadline time.Time
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenDeadline, _ = r.Context().Deadline()
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		rc := http.NewResponseController(w)
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, "id: %d\ndata: {\"n\":%d}\n\n", i, i)
			if err := rc.Flush(); err != nil {
				t.Errorf("flush: %v", err)
				return
			}
			select {
			case <-read:
			case <-r.Context().Done():
				t.Error("the reader never saw event", i)
				return
			}
		}
	})
	p, br := serve(t, ctx, h, proxyEvent("GET", "/runs/r/events", ""))
	if p.StatusCode != 200 || p.Header("Content-Type") != "text/event-stream" ||
		fmt.Sprint(p.MultiValueHeaders["Set-Cookie"]) != "[a=1 b=2]" {
		t.Fatalf("prelude %+v", p)
	}
	for i := 1; i <= 3; i++ {
		var ev strings.Builder
		for !strings.HasSuffix(ev.String(), "\n\n") {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d: %v after %q", i, err, ev.String())
			}
			ev.WriteString(line)
		}
		if want := fmt.Sprintf("id: %d\ndata: {\"n\":%d}\n\n", i, i); ev.String() != want {
			t.Fatalf("event %d: %q", i, ev.String())
		}
		read <- i
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the last event: %q %v", rest, err)
	}
	if !seenDeadline.Equal(deadline) {
		t.Fatalf("handler deadline %v, want %v", seenDeadline, deadline)
	}
}

// A handler that never flushes still answers: status, headers and body at
// its return; status defaults to 200 and Content-Type is sniffed as
// net/http would.
func TestAPIGatewayBufferedAnswer(t *testing.T) {
	p, br := serve(t, context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html>hi</html>")
	}), proxyEvent("GET", "/x", ""))
	b, _ := io.ReadAll(br)
	if p.StatusCode != 200 || !strings.HasPrefix(p.Header("Content-Type"), "text/html") || string(b) != "<html>hi</html>" {
		t.Fatalf("%+v %q", p, b)
	}
	p, br = serve(t, context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), proxyEvent("DELETE", "/x", ""))
	b, _ = io.ReadAll(br)
	if p.StatusCode != 204 || len(b) != 0 {
		t.Fatalf("%+v %q", p, b)
	}
	p, br = serve(t, context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), proxyEvent("GET", "/x", ""))
	b, _ = io.ReadAll(br)
	if p.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("%+v %q", p, b)
	}
}

// A panicking handler answers 500 with the error envelope (before any
// write) instead of leaving the caller waiting.
func TestAPIGatewayPanic(t *testing.T) {
	resp, err := door.WrapAPIGateway(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }), nil)(
		context.Background(), proxyEvent("GET", "/x", ""))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp)
	p, err := lambdatest.ReadPrelude(br)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(br)
	if p.StatusCode != 500 || !strings.Contains(string(b), `"code":"internal"`) || err == nil {
		t.Fatalf("%+v %q %v", p, b, err)
	}
}

// A key the authorizer bound to a body digest is believed only with that
// body: another body is refused 401 before the door sees it.
func TestAPIGatewayBodyDigest(t *testing.T) {
	key := strings.Repeat("ab", 32)
	body := `{"threadId":"t"}`
	var seat string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seat = door.AuthenticatedKey(r) })
	ev := proxyEvent("POST", "/agui/p/n", body)
	ev.RequestContext.Authorizer = map[string]any{door.AuthorizerKeyField: key, door.AuthorizerBodyField: identity.SHA256Hex([]byte(body))}
	p, _ := serve(t, context.Background(), h, ev)
	if p.StatusCode != 200 || seat != key {
		t.Fatalf("matching body: %d seat %q", p.StatusCode, seat)
	}
	seat = "untouched"
	ev.Body = `{"threadId":"other"}`
	p, br := serve(t, context.Background(), h, ev)
	b, _ := io.ReadAll(br)
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	if p.StatusCode != 401 || json.Unmarshal(b, &env) != nil || env.Error.Code != door.CodeBodyMismatch || seat != "untouched" {
		t.Fatalf("other body: %+v %s seat %q", p, b, seat)
	}
}

// A reader that stops reading (the runtime closed the response) fails the
// handler's next flush instead of blocking it forever.
func TestAPIGatewayClosedStream(t *testing.T) {
	flushed := make(chan error, 1)
	wrote := make(chan struct{})
	resp, err := door.WrapAPIGateway(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		<-wrote
		_, _ = w.Write([]byte("data: x\n\n"))
		flushed <- http.NewResponseController(w).Flush()
	}), nil)(context.Background(), proxyEvent("GET", "/x", ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Close(); err != nil {
		t.Fatal(err)
	}
	close(wrote)
	if err := <-flushed; err == nil {
		t.Fatal("flush into a closed stream succeeded")
	}
}

func FuzzNewAPIGatewayRequest(f *testing.F) {
	f.Add("GET", "/runs/r/events", "after", "3", "Accept", "text/event-stream", "", false)
	f.Add("POST", "/agui/%zz/n", "a b", "c&d", "X", "y\r\nz", "e30=", true)
	f.Fuzz(func(t *testing.T, method, path, qk, qv, hk, hv, body string, b64 bool) {
		ev := &events.APIGatewayProxyRequest{HTTPMethod: method, Path: path, Body: body, IsBase64Encoded: b64,
			QueryStringParameters: map[string]string{qk: qv}, Headers: map[string]string{hk: hv}}
		r, got, err := door.NewAPIGatewayRequest(context.Background(), ev)
		if err != nil {
			return
		}
		if !b64 && string(got) != body {
			t.Fatalf("body %q, want %q", got, body)
		}
		if r.URL.Path != path && !(path == "" && r.URL.Path == "/") {
			t.Fatalf("path %q, want %q", r.URL.Path, path)
		}
		if door.AuthenticatedKey(r) != "" {
			t.Fatal("a seat without an authorizer")
		}
	})
}
