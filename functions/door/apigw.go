package door

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/core/identity"
)

// The doors' Lambda seat: an http.Handler served through an API Gateway
// REST API whose Lambda proxy integrations stream (responseTransferMode
// STREAM, integration URI ending in /response-streaming-invocations).
// aws-lambda-go ships the response type (events.APIGatewayProxyStreamingResponse:
// JSON metadata, 8 NUL bytes, then the body); this is the glue it lacks: the
// REST proxy request event to an *http.Request, and the handler's writes and
// flushes to the streamed body.

// Authorizer context keys the funduq authorizer (functions/authorizer)
// returns and the glue reads from requestContext.authorizer.
const (
	// AuthorizerKeyField is the caller's authenticated public key (64 hex).
	AuthorizerKeyField = "funduqKey"
	// AuthorizerBodyField binds the key to a body: the lowercase hex sha256
	// of the body the presenter signed. A REQUEST authorizer never sees the
	// body, so the glue checks it here and refuses a request whose body is
	// not the one signed.
	AuthorizerBodyField = "bodySha256"
)

// CodeBodyMismatch is the refusal of a request whose body is not the one
// its presenter signature (verified by the authorizer) covers.
const CodeBodyMismatch = "presenter_body_mismatch"

type authKeyCtx struct{}

// WithAuthenticatedKey returns ctx carrying the caller key an authorizer
// verified (the D12 authorizer seat).
func WithAuthenticatedKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, authKeyCtx{}, key)
}

// AuthenticatedKey is the doors' authorizer seat: the caller's key the
// Lambda glue took from requestContext.authorizer, or "". It is never read
// from a client-supplied header.
func AuthenticatedKey(r *http.Request) string {
	k, _ := r.Context().Value(authKeyCtx{}).(string)
	if identity.IsPublicKeyHex(k) {
		return k
	}
	return ""
}

// LambdaAuthorizedKey is the seat the Lambda entries pass as the doors'
// AuthorizedKey option (AuthenticatedKey).
func LambdaAuthorizedKey(r *http.Request) string { return AuthenticatedKey(r) }

type apigwReqCtx struct{}

// APIGatewayRequestFromContext returns the proxy event a request was built
// from by WrapAPIGateway.
func APIGatewayRequestFromContext(ctx context.Context) (*events.APIGatewayProxyRequest, bool) {
	ev, ok := ctx.Value(apigwReqCtx{}).(*events.APIGatewayProxyRequest)
	return ev, ok
}

// NewAPIGatewayRequest builds the *http.Request a REST proxy event stands
// for, and the decoded body. The authorizer's key, when there is one, is on
// the request's context (AuthenticatedKey).
func NewAPIGatewayRequest(ctx context.Context, ev *events.APIGatewayProxyRequest) (*http.Request, []byte, error) {
	body := []byte(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, nil, fmt.Errorf("apigw: base64 body: %w", err)
		}
		body = b
	}
	// API Gateway always sends an absolute resource path; anything else
	// would make a URL that does not name the path at all.
	if ev.Path != "" && !strings.HasPrefix(ev.Path, "/") {
		return nil, nil, errors.New("apigw: the request path is not absolute")
	}
	u := &url.URL{Scheme: "https", Host: ev.RequestContext.DomainName}
	setEscapedPath(u, ev.Path)
	q := url.Values{}
	if len(ev.MultiValueQueryStringParameters) > 0 {
		for k, vs := range ev.MultiValueQueryStringParameters {
			for _, v := range vs {
				q.Add(k, v)
			}
		}
	} else {
		for k, v := range ev.QueryStringParameters {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	method := ev.HTTPMethod
	if method == "" {
		method = ev.RequestContext.HTTPMethod
	}
	ctx = context.WithValue(ctx, apigwReqCtx{}, ev)
	if key := authorizerString(ev, AuthorizerKeyField); identity.IsPublicKeyHex(key) {
		ctx = WithAuthenticatedKey(ctx, key)
	}
	r, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(string(body)))
	if err != nil {
		return nil, nil, fmt.Errorf("apigw: request: %w", err)
	}
	if len(ev.MultiValueHeaders) > 0 {
		for k, vs := range ev.MultiValueHeaders {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
	} else {
		for k, v := range ev.Headers {
			r.Header.Set(k, v)
		}
	}
	if u.Host == "" {
		u.Host = r.Header.Get("Host")
	}
	r.Host = u.Host
	// API Gateway is the only proxy in front: what the doors derive public
	// URLs from (the A2A agent card) is its view, never a client's claim.
	// The public path is requestContext.path (with the stage on the
	// execute-api host, without it under a custom domain); what it has
	// before the resource path is the prefix.
	r.Header.Set("X-Forwarded-Proto", "https")
	r.Header.Set("X-Forwarded-Host", u.Host)
	r.Header.Del("X-Forwarded-Prefix")
	if pub := ev.RequestContext.Path; pub != "" && pub != ev.Path && strings.HasSuffix(pub, ev.Path) {
		r.Header.Set("X-Forwarded-Prefix", strings.TrimSuffix(pub, ev.Path))
	}
	r.RemoteAddr = ev.RequestContext.Identity.SourceIP
	r.RequestURI = u.RequestURI()
	r.ContentLength = int64(len(body))
	return r, body, nil
}

// setEscapedPath sets u's path from a proxy event's. A REST API hands the
// path on as the caller sent it, still percent-encoded, so it is read as
// an escaped path (what net/http does with a request line, so the doors
// route and name the same thing behind API Gateway as behind the local
// server). A byte that never appears literally in an escaped path (a space,
// non-ASCII, '?', '#', a '%' not starting an escape) is escaped first: a
// path that arrives decoded (an HTTP API, a hand-written test event) then
// names what it says instead of being split into a query or refused.
func setEscapedPath(u *url.URL, p string) {
	if p == "" {
		p = "/"
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%' && i+2 < len(p) && isHexDigit(p[i+1]) && isHexDigit(p[i+2]):
			b.WriteByte(c)
		case c <= ' ' || c >= 0x7f || c == '%' || c == '?' || c == '#' || c == '"' || c == '<' || c == '>' ||
			c == '\\' || c == '^' || c == '`' || c == '{' || c == '|' || c == '}':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	raw := b.String()
	dec, err := url.PathUnescape(raw)
	if err != nil { // cannot happen: every '%' above starts an escape
		dec = p
	}
	u.Path, u.RawPath = dec, raw
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func authorizerString(ev *events.APIGatewayProxyRequest, field string) string {
	if ev.RequestContext.Authorizer == nil {
		return ""
	}
	s, _ := ev.RequestContext.Authorizer[field].(string)
	return s
}

// WrapAPIGateway turns h into the Lambda handler of a streaming REST proxy
// integration. The handler runs with the invocation's context (its
// deadline is the Lambda deadline); what it writes is buffered like
// net/http's and reaches the caller at each Flush (http.Flusher or
// http.ResponseController) and when it returns. The status and headers go
// out at the first WriteHeader, Write or Flush. A request whose authorizer
// bound the caller's key to a body digest that does not match the body is
// refused 401 without reaching h.
func WrapAPIGateway(h http.Handler, log *slog.Logger) func(context.Context, *events.APIGatewayProxyRequest) (*events.APIGatewayProxyStreamingResponse, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, ev *events.APIGatewayProxyRequest) (*events.APIGatewayProxyStreamingResponse, error) {
		r, body, err := NewAPIGatewayRequest(ctx, ev)
		if err != nil {
			return nil, err
		}
		var serve http.Handler = h
		if want := authorizerString(ev, AuthorizerBodyField); AuthenticatedKey(r) != "" && want != "" &&
			want != identity.SHA256Hex(body) {
			// In the door's own envelope (RefusalWriter): an A2A caller is
			// answered a JSON-RPC error to its call's id, as it is for the
			// door's own refusals.
			serve = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				WriteRefusal(h, log, w, r, Refuse(http.StatusUnauthorized, CodeBodyMismatch,
					"the body is not the one the %s signature covers", identity.PresenterHeader))
			})
		}
		pr, pw := io.Pipe()
		rw := &streamWriter{header: http.Header{}, ready: make(chan struct{}), pipe: pw}
		rw.buf = bufio.NewWriterSize(pw, 4096)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					log.Error("door handler panicked", "panic", fmt.Sprint(p), "path", r.URL.Path)
					if !rw.sent() {
						rw.header = http.Header{"Content-Type": {"application/json"}}
						rw.WriteHeader(http.StatusInternalServerError)
						_, _ = io.WriteString(rw, `{"error":{"code":"internal","message":"internal error"}}`)
					}
					_ = rw.buf.Flush()
					_ = pw.CloseWithError(fmt.Errorf("door handler panicked: %v", p))
					return
				}
				rw.WriteHeader(http.StatusOK) // no-op unless the handler wrote nothing
				_ = rw.buf.Flush()
				_ = pw.Close()
			}()
			serve.ServeHTTP(rw, r)
		}()
		<-rw.ready
		resp := &events.APIGatewayProxyStreamingResponse{StatusCode: rw.status, Body: pr}
		for k, vs := range rw.sentHeader {
			if len(vs) == 1 {
				if resp.Headers == nil {
					resp.Headers = map[string]string{}
				}
				resp.Headers[k] = vs[0]
			} else if len(vs) > 1 {
				if resp.MultiValueHeaders == nil {
					resp.MultiValueHeaders = map[string][]string{}
				}
				resp.MultiValueHeaders[k] = vs
			}
		}
		return resp, nil
	}
}

// streamWriter is the handler's http.ResponseWriter: a buffer over the pipe
// the runtime reads the body from.
type streamWriter struct {
	header     http.Header
	buf        *bufio.Writer
	pipe       *io.PipeWriter
	once       sync.Once
	ready      chan struct{}
	status     int
	sentHeader http.Header
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) sent() bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

func (w *streamWriter) WriteHeader(code int) { w.writeHeader(code, nil) }

func (w *streamWriter) writeHeader(code int, first []byte) {
	w.once.Do(func() {
		if w.header.Get("Content-Type") == "" && len(first) > 0 {
			w.header.Set("Content-Type", http.DetectContentType(first))
		}
		w.status = code
		w.sentHeader = w.header.Clone()
		close(w.ready)
	})
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.writeHeader(http.StatusOK, p)
	return w.buf.Write(p)
}

// Flush hands what was written to the runtime, which streams it to API
// Gateway as one chunk.
func (w *streamWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush with the error (http.ResponseController uses it): a
// closed pipe means the runtime stopped reading.
func (w *streamWriter) FlushError() error {
	w.writeHeader(http.StatusOK, nil)
	if err := w.buf.Flush(); err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			return fmt.Errorf("apigw: response stream closed: %w", err)
		}
		return err
	}
	return nil
}
