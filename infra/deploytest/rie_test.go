package deploytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/lambdatest"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// The Lambda seat, checked without AWS: each function's real bootstrap — built by scripts/build-lambdas exactly
// as a deployment builds it, for this machine's architecture — runs under
// the AWS Lambda Runtime Interface Emulator and is invoked through the
// emulator's invoke endpoint with the events API Gateway sends: REST proxy
// requests for the doors (with requestContext.authorizer as the REQUEST
// authorizer fills it: the authenticating seat (a) of docs/design.md D12),
// REQUEST-authorizer events for the authorizer.
//
// The emulator buffers a streamed response: it collects what the function
// streams and answers the invoke with a Content-Length once the function
// is done. So this checks the streaming format end to end through the real
// runtime client (the JSON metadata prelude, the 8 NUL bytes, then the
// body) and the body of a real run, not that SSE events leave one by one;
// incremental flushing is proven at the adapter, where the test can hold
// the handler between two events (functions/door apigw_test.go,
// door.WrapAPIGateway), and in an account by the README's smoke test.

// rieModule is the emulator's main package (a tool in go.mod).
const rieModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie"

// rieGuard bounds every wait on an emulator: a hang detector, never a
// timing assertion.
const rieGuard = 60 * time.Second

// goTool is the go command the test was built by, for the emulator build.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	for _, p := range []string{filepath.Join(os.Getenv("GOROOT"), "bin", "go"), "/usr/local/go/bin/go"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no go command on PATH (the emulator test builds the bootstraps)")
	return ""
}

// buildLambdas builds every function's bootstrap (scripts/build-lambdas,
// for this machine) and the emulator, at once, into one folder.
func buildLambdas(t *testing.T) (dir, rie string) {
	t.Helper()
	dir = t.TempDir()
	rie = filepath.Join(dir, "aws-lambda-rie")
	root := repoRoot(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	build := func(i int, cmd *exec.Cmd) {
		defer wg.Done()
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			errs[i] = fmt.Errorf("%v: %v\n%s", cmd.Args, err, b)
		}
	}
	wg.Add(2)
	go build(0, exec.Command(filepath.Join(root, "scripts", "build-lambdas"), "--out", dir, "--arch", runtime.GOARCH))
	rieCmd := exec.Command(goTool(t), "build", "-trimpath", "-o", rie, rieModule)
	rieCmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	go build(1, rieCmd)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return dir, rie
}

// freeAddr is a loopback address nothing listens on (the emulator binds
// its own sockets, so it cannot be handed a listener).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// emulator is one Lambda execution environment: the emulator process and
// the bootstrap it starts on the first invoke. Like a real environment it
// serves one invocation at a time (mu).
type emulator struct {
	t    *testing.T
	name string
	url  string
	out  *syncbuf.Buffer
	mu   sync.Mutex
}

// startEmulator runs bootstrap under the emulator with env (and nothing
// else: the emulator hands its environment to the function).
func startEmulator(t *testing.T, rie, bootstrap, name string, env []string) *emulator {
	t.Helper()
	invokeAddr, runtimeAddr := freeAddr(t), freeAddr(t)
	e := &emulator{t: t, name: name, url: "http://" + invokeAddr + "/2015-03-31/functions/function/invocations", out: &syncbuf.Buffer{}}
	cmd := exec.Command(rie, "--log-level", "error",
		"--runtime-interface-emulator-address", invokeAddr, "--runtime-api-address", runtimeAddr, bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "AWS_LAMBDA_FUNCTION_NAME=" + name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=120", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256"}, env...)
	cmd.Stdout, cmd.Stderr = e.out, e.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s emulator output:\n%s", name, e.out.String())
		}
	})
	// The invoke endpoint is up when it accepts a connection (the
	// bootstrap itself starts on the first invoke).
	deadline := time.Now().Add(rieGuard)
	for {
		c, err := net.DialTimeout("tcp", invokeAddr, time.Second)
		if err == nil {
			_ = c.Close()
			return e
		}
		select {
		case err := <-exited:
			t.Fatalf("%s emulator exited before listening: %v\n%s", name, err, e.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s emulator not listening on %s: %v", name, invokeAddr, err)
		}
	}
}

// invoke sends one event and returns the emulator's answer: the status,
// its headers and the function's whole response payload.
func (e *emulator) invoke(ev any) (int, http.Header, []byte) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	b, err := json.Marshal(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rieGuard)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(b))
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s invoke: %v", e.name, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s invoke: %v", e.name, err)
	}
	return resp.StatusCode, resp.Header, out
}

// answer is what API Gateway would make of a door's streamed response.
type answer struct {
	lambdatest.Prelude
	Body string
	// Invoke is the emulator's own answer's headers.
	Invoke http.Header
}

// door invokes a door with a REST proxy event and reads the streamed
// response: the metadata prelude, the NUL delimiter, then the body.
func (e *emulator) door(ev *events.APIGatewayProxyRequest) answer {
	e.t.Helper()
	code, hdr, payload := e.invoke(ev)
	if code != http.StatusOK {
		e.t.Fatalf("%s %s %s: invoke status %d %v: %q", e.name, ev.HTTPMethod, ev.Path, code, hdr, payload)
	}
	br := bufio.NewReader(bytes.NewReader(payload))
	p, err := lambdatest.ReadPrelude(br)
	if err != nil {
		e.t.Fatalf("%s %s %s: not a streamed proxy response: %v: %q", e.name, ev.HTTPMethod, ev.Path, err, payload)
	}
	rest, _ := io.ReadAll(br)
	return answer{Prelude: p, Body: string(rest), Invoke: hdr}
}

// proxyEvent is a REST proxy event as API Gateway sends it for a route
// under the v1 stage of the execute-api host.
func proxyEvent(method, path, body string, hdr map[string]string) *events.APIGatewayProxyRequest {
	h := map[string]string{"Host": "api.example"}
	mv := map[string][]string{"Host": {"api.example"}}
	for k, v := range hdr {
		h[k] = v
		mv[k] = []string{v}
	}
	return &events.APIGatewayProxyRequest{Resource: "/{proxy+}", Path: path, HTTPMethod: method, Headers: h,
		MultiValueHeaders: mv, Body: body,
		RequestContext: events.APIGatewayProxyRequestContext{AccountID: "123456789012", ResourcePath: "/{proxy+}",
			Stage: "v1", RequestID: fmt.Sprintf("req-%d", time.Now().UnixNano()), DomainName: "api.example",
			APIID: "abc123", HTTPMethod: method, Path: "/v1" + path,
			Identity: events.APIGatewayRequestIdentity{SourceIP: "203.0.113.7"}}}
}

// authorizerEvent is the REQUEST authorizer event API Gateway sends for a
// request to method path with hdr.
func authorizerEvent(method, path string, hdr map[string]string) events.APIGatewayCustomAuthorizerRequestTypeRequest {
	mv := map[string][]string{}
	for k, v := range hdr {
		mv[k] = []string{v}
	}
	return events.APIGatewayCustomAuthorizerRequestTypeRequest{Type: "REQUEST",
		MethodArn: "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/" + method + path,
		Resource:  "/{proxy+}", Path: path, HTTPMethod: method, Headers: hdr, MultiValueHeaders: mv,
		RequestContext: events.APIGatewayCustomAuthorizerRequestTypeRequestContext{AccountID: "123456789012",
			ResourcePath: "/{proxy+}", Stage: "v1", RequestID: "auth-req", APIID: "abc123", HTTPMethod: method, Path: "/v1" + path}}
}

// authorize runs the authorizer on a request the way API Gateway does
// before the door's integration: an Allow's context, or ok false.
func (e *emulator) authorize(method, path string, hdr map[string]string) (events.APIGatewayCustomAuthorizerResponse, string, bool) {
	e.t.Helper()
	code, h, payload := e.invoke(authorizerEvent(method, path, hdr))
	if code != http.StatusOK {
		e.t.Fatalf("authorizer: invoke status %d %v: %q", code, h, payload)
	}
	var fnErr struct {
		ErrorMessage string `json:"errorMessage"`
	}
	if json.Unmarshal(payload, &fnErr) == nil && fnErr.ErrorMessage != "" {
		return events.APIGatewayCustomAuthorizerResponse{}, fnErr.ErrorMessage, false
	}
	var out events.APIGatewayCustomAuthorizerResponse
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		e.t.Fatalf("authorizer answer %q: %v", payload, err)
	}
	return out, "", true
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct{ Code string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an error envelope: %q", body)
	}
	return e.Error.Code
}

// sseData is the data lines of an SSE body, in order.
func sseData(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func testSigner(t *testing.T, b byte) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(b))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBootstrapsUnderEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four bootstraps and the emulator")
	}
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the emulator runs on linux/amd64 and linux/arm64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		t.Skipf("the emulator runs on linux/amd64 and linux/arm64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	began := time.Now()
	dir, rie := buildLambdas(t)
	t.Logf("bootstraps and emulator built in %v", time.Since(began).Round(time.Millisecond))

	// One broker node on one migrated database; the doors' environments
	// reach the same stores, as in a deployment.
	h := nodetest.Start(t, nil)
	doorEnv := []string{
		"FUNDUQ_DATABASE_URL=" + h.Cfg.Storage.DatabaseURL,
		"FUNDUQ_REDIS_URL=" + h.Cfg.Storage.RedisURL,
		"FUNDUQ_REDIS_PREFIX=" + h.Prefix,
		"FUNDUQ_IDENTITY_KEY=" + h.Cfg.Identity.IdentityKey,
		"FUNDUQ_TOKEN_SECRET=" + h.Cfg.Identity.TokenSecret,
		"FUNDUQ_LOG_LEVEL=warn",
	}
	start := func(name string, env []string) *emulator {
		return startEmulator(t, rie, filepath.Join(dir, name, "bootstrap"), name, env)
	}
	auth := start("authorizer", []string{"FUNDUQ_AUTH_ALLOW_ANONYMOUS=true"})
	agui, a2a, kyok := start("agui", doorEnv), start("a2a", doorEnv), start("kyok", doorEnv)
	// A provider per door, so that runs offered in parallel subtests never
	// cross.
	aguiProv, a2aProv := h.Connect(0xe1, nil), h.Connect(0xe2, nil)
	aguiProv.Register("echo")
	a2aProv.Register("echo")
	presenter, stranger := testSigner(t, 0xc2), testSigner(t, 0xc9)

	t.Run("authorizer", func(t *testing.T) {
		t.Parallel()
		body := `{"hello":"world"}`
		digest := identity.SHA256Hex([]byte(body))
		proof := identity.MakePresenterHeader(presenter, time.Now().Unix(), []byte(body))
		out, _, ok := auth.authorize("POST", "/agui/k/echo", map[string]string{
			identity.PresenterHeader: proof, "Funduq-Body-Sha256": digest, "Content-Type": "application/json"})
		want := "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/POST/agui/k/echo"
		if !ok || out.PrincipalID != presenter.PublicKeyHex() || out.PolicyDocument.Version != "2012-10-17" ||
			len(out.PolicyDocument.Statement) != 1 || out.PolicyDocument.Statement[0].Effect != "Allow" ||
			fmt.Sprint(out.PolicyDocument.Statement[0].Action) != "[execute-api:Invoke]" ||
			fmt.Sprint(out.PolicyDocument.Statement[0].Resource) != "["+want+"]" {
			t.Fatalf("valid proof: ok %v, %+v", ok, out)
		}
		if out.Context[door.AuthorizerKeyField] != presenter.PublicKeyHex() || out.Context[door.AuthorizerBodyField] != digest ||
			out.Context["via"] != "presenter" || len(out.Context) != 3 {
			t.Fatalf("valid proof: context %v", out.Context)
		}

		// A forged proof: the presenter's key over a signature by another.
		var forged map[string]any
		if err := json.Unmarshal([]byte(identity.MakePresenterHeader(stranger, time.Now().Unix(), []byte(body))), &forged); err != nil {
			t.Fatal(err)
		}
		forged["publicKey"] = presenter.PublicKeyHex()
		fb, _ := json.Marshal(forged)
		if out, msg, ok := auth.authorize("POST", "/agui/k/echo", map[string]string{
			identity.PresenterHeader: string(fb), "Funduq-Body-Sha256": digest}); ok || msg != "Unauthorized" {
			t.Fatalf("forged proof: ok %v %q %+v", ok, msg, out)
		}
		// A proof over another body than the declared one.
		if _, msg, ok := auth.authorize("POST", "/agui/k/echo", map[string]string{
			identity.PresenterHeader: proof, "Funduq-Body-Sha256": identity.SHA256Hex([]byte("{}"))}); ok || msg != "Unauthorized" {
			t.Fatalf("proof over another body: ok %v %q", ok, msg)
		}
		// No credential: anonymous callers are allowed here, with no key.
		out, _, ok = auth.authorize("GET", "/agents", nil)
		if !ok || out.PrincipalID != "anonymous" || out.Context["via"] != "anonymous" || out.Context[door.AuthorizerKeyField] != nil {
			t.Fatalf("anonymous: ok %v %+v", ok, out)
		}
	})

	t.Run("agui", func(t *testing.T) {
		t.Parallel()
		a := agui.door(proxyEvent("GET", "/agents", "", nil))
		if a.StatusCode != 200 || !strings.HasPrefix(a.Header("Content-Type"), "application/json") ||
			!strings.Contains(a.Body, `"name":"echo"`) || !strings.Contains(a.Body, aguiProv.Key) {
			t.Fatalf("GET /agents: %+v", a)
		}

		// A real run: the caller's POST streams the run's SSE to its end.
		path := "/agui/" + aguiProv.Key + "/echo"
		input := func(runID, props string) string {
			return fmt.Sprintf(`{"threadId":"new","runId":%q,"state":{},"messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":%s}`, runID, props)
		}
		sse := map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream"}
		// The provider plays its part while the invoke is under way (the
		// emulator answers once the function is done).
		served := make(chan string, 1)
		play := func() {
			f := aguiProv.Offer()
			served <- string(f.RunInput)
			aguiProv.Accept(f.RunID)
			aguiProv.Complete(f.RunID, *f.ThreadID)
		}
		go play()
		a = agui.door(proxyEvent("POST", path, input("caller-run-1", "{}"), sse))
		<-served
		data := sseData(a.Body)
		if a.StatusCode != 200 || a.Header("Content-Type") != "text/event-stream" || len(data) != 5 ||
			!strings.HasPrefix(data[0], `{"type":"RUN_STARTED"`) || !strings.HasPrefix(data[4], `{"type":"RUN_FINISHED"`) ||
			!strings.Contains(a.Body, "id: 5\n") {
			t.Fatalf("run: %d %v %v\n%s", a.StatusCode, a.Headers, a.MultiValueHeaders, a.Body)
		}
		t.Logf("the emulator answered the run's invoke with Content-Length %q, Transfer-Encoding %q (it buffers)",
			a.Invoke.Get("Content-Length"), a.Invoke.Get("Transfer-Encoding"))

		// An actor chain with no presenter is refused with the door's
		// typed refusal.
		h0, err := identity.SignHop(stranger, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		h1, err := identity.SignHop(presenter, &h0, nil)
		if err != nil {
			t.Fatal(err)
		}
		chain, _ := json.Marshal([]string{h0.Token, h1.Token})
		chained := input("caller-run-2", `{"actorChain":`+string(chain)+`}`)
		a = agui.door(proxyEvent("POST", path, chained, sse))
		if a.StatusCode != 401 || !strings.HasPrefix(a.Header("Content-Type"), "application/json") ||
			errorCode(t, a.Body) != door.CodePresenterRequired {
			t.Fatalf("chain without a presenter: %+v", a)
		}

		// With the authorizer on: API Gateway runs it on the request's
		// headers and hands its Allow's context to the door in
		// requestContext.authorizer, with the same headers.
		proofHdr := map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(presenter, time.Now().Unix(), []byte(chained)),
			"Funduq-Body-Sha256": identity.SHA256Hex([]byte(chained)), "Content-Type": "application/json"}
		allow, msg, ok := auth.authorize("POST", path, proofHdr)
		if !ok {
			t.Fatalf("authorizer refused a valid proof: %q", msg)
		}
		authorized := func(body string) *events.APIGatewayProxyRequest {
			hdr := map[string]string{"Accept": "text/event-stream"}
			for k, v := range proofHdr {
				hdr[k] = v
			}
			ev := proxyEvent("POST", path, body, hdr)
			ev.RequestContext.Authorizer = map[string]any{"principalId": allow.PrincipalID}
			for k, v := range allow.Context {
				ev.RequestContext.Authorizer[k] = v
			}
			return ev
		}
		go play()
		a = agui.door(authorized(chained))
		in := <-served
		if data := sseData(a.Body); a.StatusCode != 200 || len(data) != 5 || !strings.HasPrefix(data[4], `{"type":"RUN_FINISHED"`) {
			t.Fatalf("authorized chain: %+v", a)
		}
		if !strings.Contains(in, h1.Token) {
			t.Fatalf("the agent did not receive the presented chain: %s", in)
		}
		// The authorizer bound the key to the body it was shown: another
		// body under the same context is refused before the door.
		a = agui.door(authorized(input("caller-run-3", `{"actorChain":`+string(chain)+`}`)))
		if a.StatusCode != 401 || errorCode(t, a.Body) != door.CodeBodyMismatch {
			t.Fatalf("another body: %+v", a)
		}
	})

	t.Run("a2a", func(t *testing.T) {
		t.Parallel()
		base := "/a2a/" + a2aProv.Key + "/echo"
		a := a2a.door(proxyEvent("GET", base+"/.well-known/agent-card.json", "", nil))
		if a.StatusCode != 200 || !strings.HasPrefix(a.Header("Content-Type"), "application/json") ||
			!regexp.MustCompile(`"url":"https://api\.example/v1/a2a/[0-9a-f]+/echo"`).MatchString(a.Body) {
			t.Fatalf("agent card: %+v", a)
		}
		jsonHdr := map[string]string{"Content-Type": "application/json"}
		a = a2a.door(proxyEvent("POST", base, `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"no-such-task"}}`, jsonHdr))
		var rpc struct {
			Error *struct{ Code int }
		}
		if a.StatusCode != 200 || json.Unmarshal([]byte(a.Body), &rpc) != nil || rpc.Error == nil || rpc.Error.Code != -32001 {
			t.Fatalf("tasks/get of an unknown task: %+v", a)
		}

		// A real run through message/stream.
		done := make(chan string, 1)
		go func() {
			f := a2aProv.Offer()
			a2aProv.Accept(f.RunID)
			a2aProv.Complete(f.RunID, *f.ThreadID)
			done <- f.RunID
		}()
		a = a2a.door(proxyEvent("POST", base, `{"jsonrpc":"2.0","id":2,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`,
			map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream"}))
		h.WaitStatus(<-done, run.Completed)
		data := sseData(a.Body)
		if a.StatusCode != 200 || a.Header("Content-Type") != "text/event-stream" || len(data) < 3 ||
			!strings.Contains(data[0], `"kind":"task"`) || !strings.Contains(data[len(data)-1], `"state":"completed"`) ||
			!strings.Contains(data[len(data)-1], `"final":true`) || !strings.Contains(a.Body, "hello") {
			t.Fatalf("message/stream: %d %v\n%s", a.StatusCode, a.Headers, a.Body)
		}
	})

	t.Run("kyok", func(t *testing.T) {
		t.Parallel()
		const path = "/kyok/v1/chat/completions"
		a := kyok.door(proxyEvent("GET", path, "", nil))
		if a.StatusCode != 405 || a.Header("Allow") != "POST" || errorCode(t, a.Body) != "method_not_allowed" {
			t.Fatalf("GET: %+v", a)
		}
		a = kyok.door(proxyEvent("POST", path, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			map[string]string{"Content-Type": "application/json", "Authorization": "Bearer not-a-token"}))
		if a.StatusCode != 401 || a.Header("Content-Type") != "application/json" || errorCode(t, a.Body) != "invalid_token" {
			t.Fatalf("a completion with a bad token: %+v", a)
		}
	})
}
