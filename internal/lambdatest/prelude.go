// Package lambdatest reads what a streaming Lambda answers API Gateway
// (the metadata prelude, the 8-byte NUL delimiter, then the body) and runs
// a Lambda bootstrap under the Runtime Interface Emulator, and starts a
// door's Lambda handler cold over an unmigrated database, for tests of the
// doors' and the authorizer's Lambda entries.
package lambdatest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Delimiter separates the JSON metadata from the body of a streamed
// response (application/vnd.awslambda.http-integration-response).
var Delimiter = []byte{0, 0, 0, 0, 0, 0, 0, 0}

// MaxPrelude bounds the metadata a reader accepts before the delimiter.
const MaxPrelude = 64 << 10

// Prelude is the metadata API Gateway turns into the HTTP status line and
// headers.
type Prelude struct {
	StatusCode        int                 `json:"statusCode"`
	Headers           map[string]string   `json:"headers"`
	MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
	Cookies           []string            `json:"cookies"`
}

// Header returns the value of a header (case-sensitive name as sent), from
// headers or, failing that, the first of multiValueHeaders.
func (p Prelude) Header(name string) string {
	if v, ok := p.Headers[name]; ok {
		return v
	}
	if vs := p.MultiValueHeaders[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// ErrNoDelimiter means the stream ended, or the prelude grew past
// MaxPrelude, before the 8 NUL bytes.
var ErrNoDelimiter = errors.New("lambdatest: no 8-byte NUL delimiter after the metadata")

// ReadPrelude reads the metadata and the delimiter from r, leaving r at the
// first byte of the body.
func ReadPrelude(r *bufio.Reader) (Prelude, error) {
	var meta []byte
	for {
		b, err := r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Prelude{}, ErrNoDelimiter
			}
			return Prelude{}, err
		}
		meta = append(meta, b)
		if bytes.HasSuffix(meta, Delimiter) {
			meta = meta[:len(meta)-len(Delimiter)]
			break
		}
		if len(meta) > MaxPrelude+len(Delimiter) {
			return Prelude{}, ErrNoDelimiter
		}
	}
	var p Prelude
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Prelude{}, fmt.Errorf("lambdatest: metadata %q: %w", meta, err)
	}
	if dec.More() {
		return Prelude{}, fmt.Errorf("lambdatest: metadata %q: trailing data", meta)
	}
	if p.StatusCode < 100 || p.StatusCode > 599 {
		return Prelude{}, fmt.Errorf("lambdatest: metadata %q: statusCode %d", meta, p.StatusCode)
	}
	return p, nil
}
