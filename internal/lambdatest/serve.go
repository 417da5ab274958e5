package lambdatest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Invoke is a streaming REST proxy integration's Lambda handler (what
// door.WrapAPIGateway returns).
type Invoke func(context.Context, *events.APIGatewayProxyRequest) (*events.APIGatewayProxyStreamingResponse, error)

// Serve serves invoke on a local listener, one invocation per request, as
// API Gateway's streaming proxy would: the event from the request (the
// listener's host as the domain), the streamed body flushed as it comes,
// so a real HTTP client (the official JavaScript clients) can drive a
// door's Lambda entry. budget gives each invocation's time, its context
// deadline, from the request's body: the door's input, not an assertion.
// The server closes when t ends.
func Serve(t testing.TB, invoke Invoke, budget func(body []byte) time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), budget(body))
		defer cancel()
		hdr := map[string]string{}
		for k := range r.Header {
			hdr[k] = r.Header.Get(k)
		}
		q := map[string]string{}
		for k := range r.URL.Query() {
			q[k] = r.URL.Query().Get(k)
		}
		path := r.URL.EscapedPath()
		resp, err := invoke(ctx, &events.APIGatewayProxyRequest{HTTPMethod: r.Method, Path: path,
			Body: string(body), Headers: hdr, QueryStringParameters: q,
			RequestContext: events.APIGatewayProxyRequestContext{DomainName: r.Host, HTTPMethod: r.Method, Path: path}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for k, v := range resp.Headers {
			w.Header().Set(k, v)
		}
		for k, vs := range resp.MultiValueHeaders {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}
