package lambdatest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// The library's own response type reads back through ReadPrelude.
func TestReadPreludeOfLibraryResponse(t *testing.T) {
	resp := &events.APIGatewayProxyStreamingResponse{StatusCode: 201,
		Headers:           map[string]string{"Content-Type": "text/event-stream"},
		MultiValueHeaders: map[string][]string{"Set-Cookie": {"a=1", "b=2"}},
		Body:              strings.NewReader("data: x\n\n")}
	br := bufio.NewReader(resp)
	p, err := ReadPrelude(br)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br)
	if p.StatusCode != 201 || p.Header("Content-Type") != "text/event-stream" || len(p.MultiValueHeaders["Set-Cookie"]) != 2 ||
		string(rest) != "data: x\n\n" {
		t.Fatalf("%+v %q", p, rest)
	}
}

func TestReadPreludeRefuses(t *testing.T) {
	for _, in := range []string{"", `{"statusCode":200}`, `{"statusCode":200}` + "\x00\x00\x00",
		`{"statusCode":0}` + string(Delimiter), `{"statusCode":200,"x":1}` + string(Delimiter),
		`{"statusCode":200}{}` + string(Delimiter), "[]" + string(Delimiter)} {
		if _, err := ReadPrelude(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
	if _, err := ReadPrelude(bufio.NewReader(bytes.NewReader(bytes.Repeat([]byte{'a'}, MaxPrelude+100)))); !errors.Is(err, ErrNoDelimiter) {
		t.Errorf("oversized prelude: %v", err)
	}
}

func FuzzReadPrelude(f *testing.F) {
	f.Add([]byte(`{"statusCode":200,"headers":{"a":"b"}}` + string(Delimiter) + "body"))
	f.Add([]byte(`{"statusCode":404}` + string(Delimiter)))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReader(bytes.NewReader(in))
		p, err := ReadPrelude(br)
		if err != nil {
			return
		}
		if p.StatusCode < 100 || p.StatusCode > 599 {
			t.Fatalf("status %d accepted", p.StatusCode)
		}
		i := bytes.Index(in, Delimiter)
		rest, _ := io.ReadAll(br)
		if i < 0 || !bytes.Equal(rest, in[i+len(Delimiter):]) {
			t.Fatalf("body %q not what follows the first delimiter in %q", rest, in)
		}
	})
}
