package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// threadOf stores n messages, m1…mn, on a new run's thread, each as
// each(i) says, straight into thread_messages (the bounds under test are
// the reads'), and returns the store and the run.
func threadOf(t *testing.T, n int, each func(i int) (message, origin string)) (*store.Store, store.Run) {
	t.Helper()
	st := storetest.Store(t)
	seedAgent(t, st)
	r := newRun(t, st)
	for i := 1; i <= n; i++ {
		msg, origin := each(i)
		if _, err := st.Pool().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
			VALUES ($1, $2, $3, $4, $5)`, r.ThreadID, r.RunID, fmt.Sprintf("m%d", i), msg, origin); err != nil {
			t.Fatal(err)
		}
	}
	return st, r
}

// ThreadMessagePage's bounds: limit messages, maxBytes of them as stored
// with a comma each (a page exactly at the bound fits; one byte less
// does not), a message larger than maxBytes named and stepped over, and
// Before reading on from where a page stopped.
func TestThreadMessagePage(t *testing.T) {
	ctx := context.Background()
	// m1…m6, 10 bytes each as stored, and m4 of 60.
	st, r := threadOf(t, 6, func(i int) (message, origin string) {
		c := "ab"
		if i == 4 {
			c = strings.Repeat("z", 52)
		}
		return fmt.Sprintf(`{"c":"%s"}`, c), "caller"
	})
	ids := func(p store.MessagePage) string {
		var out []string
		for _, m := range p.Messages {
			var v struct{ C string }
			_ = json.Unmarshal(m, &v)
			out = append(out, fmt.Sprint(len(v.C)))
		}
		for _, o := range p.Omitted {
			out = append(out, fmt.Sprintf("omitted %s %d", o.MessageID, o.Bytes))
		}
		return fmt.Sprintf("%v more=%v", out, p.More)
	}
	page := func(before int64, limit, maxBytes int) store.MessagePage {
		t.Helper()
		p, err := st.ThreadMessagePage(ctx, r.ThreadID, before, limit, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Newest first: m6, m5 (22 bytes), m4 omitted (60 > 33), m3 (33):
	// exactly the bound.
	p := page(0, 10, 33)
	if ids(p) != "[2 2 2 omitted m4 60] more=true" {
		t.Fatalf("bound 33: %s", ids(p))
	}
	// The rest: m2, m1.
	if rest := page(p.Before, 10, 33); ids(rest) != "[2 2] more=false" || rest.Before != 0 {
		t.Fatalf("after bound 33: %s before=%d", ids(rest), rest.Before)
	}
	// One byte less: m6, m5 and the omitted m4; m3 is more, and then m1.
	p = page(0, 10, 32)
	if ids(p) != "[2 2 omitted m4 60] more=true" {
		t.Fatalf("bound 32: %s", ids(p))
	}
	if rest := page(p.Before, 10, 32); ids(rest) != "[2 2] more=true" {
		t.Fatalf("after bound 32: %s", ids(rest))
	}
	// A limit counts an omitted message too; a limit of the whole thread
	// has no more.
	if p = page(0, 3, 1000); ids(p) != "[52 2 2] more=true" {
		t.Fatalf("limit 3: %s", ids(p))
	}
	if p = page(0, 6, 1000); ids(p) != "[2 2 2 52 2 2] more=false" {
		t.Fatalf("limit 6: %s", ids(p))
	}
	// Paging back by one reads every message once, newest first.
	var sizes []string
	for before := int64(0); ; {
		p := page(before, 1, 1000)
		sizes = append(sizes, strings.TrimSuffix(strings.TrimPrefix(ids(p), "["), "] more=true"))
		if !p.More {
			break
		}
		before = p.Before
	}
	if !slices.Equal(sizes, []string{"2", "2", "52", "2", "2", "2] more=false"}) {
		t.Fatalf("paging by one: %q", sizes)
	}
	// An unknown thread is an empty page.
	if p, err := st.ThreadMessagePage(ctx, "thread_none", 0, 10, 100); err != nil || len(p.Messages) != 0 || p.More {
		t.Fatalf("unknown thread: %+v %v", p, err)
	}
}

// ThreadOpening's bounds: the oldest limit messages in thread order, with
// their origin, and nothing (ok false) once they hold more than maxBytes
// as stored — a bound exactly met is within it.
func TestThreadOpening(t *testing.T) {
	ctx := context.Background()
	// m1…m4, 10 bytes each as stored; m3 the agent's.
	st, r := threadOf(t, 4, func(i int) (message, origin string) {
		origin = "caller"
		if i == 3 {
			origin = "agent"
		}
		return fmt.Sprintf(`{"c":"a%d"}`, i), origin
	})
	opening := func(limit, maxBytes int) string {
		t.Helper()
		msgs, ok, err := st.ThreadOpening(ctx, r.ThreadID, limit, maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			out = append(out, m.Origin+" "+string(m.Message))
		}
		return fmt.Sprintf("%v ok=%v", out, ok)
	}
	if got := opening(3, 30); got != `[caller {"c":"a1"} caller {"c":"a2"} agent {"c":"a3"}] ok=true` {
		t.Fatalf("3 within 30 bytes: %s", got)
	}
	if got := opening(3, 29); got != `[] ok=false` {
		t.Fatalf("3 past 29 bytes: %s", got)
	}
	if got := opening(10, 1000); !strings.HasPrefix(got, `[caller {"c":"a1"}`) || !strings.HasSuffix(got, `caller {"c":"a4"}] ok=true`) {
		t.Fatalf("the whole thread: %s", got)
	}
	if got := opening(1, 10); got != `[caller {"c":"a1"}] ok=true` {
		t.Fatalf("the first: %s", got)
	}
}
