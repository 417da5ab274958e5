package tickets_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/tickets"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
)

var (
	keyA = strings.Repeat("a", 64)
	keyB = strings.Repeat("b", 64)
)

var ticketRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func newStore(t *testing.T) (*tickets.Store, *redis.Client, string) {
	t.Helper()
	rdb, prefix := redistest.Client(t)
	return tickets.New(rdb, prefix), rdb, prefix
}

func TestIssueStoresTicketUnderPrefixWithTTL(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := context.Background()
	tk, err := s.Issue(ctx, keyA)
	if err != nil {
		t.Fatal(err)
	}
	if !ticketRE.MatchString(tk) {
		t.Fatalf("ticket %q is not 32 lowercase hex chars", tk)
	}
	if got := redistest.Keys(t, rdb, prefix); len(got) != 1 || got[0] != "ticket:"+tk {
		t.Fatalf("keys = %v, want [ticket:%s]", got, tk)
	}
	v, err := rdb.Get(ctx, prefix+"ticket:"+tk).Result()
	if err != nil || v != keyA {
		t.Fatalf("stored value = %q, %v; want the key", v, err)
	}
	ttl, err := rdb.PTTL(ctx, prefix+"ticket:"+tk).Result()
	if err != nil || ttl <= 0 || ttl > tickets.TTL {
		t.Fatalf("PTTL = %v, %v; want in (0, %v]", ttl, err, tickets.TTL)
	}
	if tickets.TTL != 60*time.Second {
		t.Fatalf("TTL = %v", tickets.TTL)
	}
}

func TestIssueDrawsDistinctTickets(t *testing.T) {
	s, _, _ := newStore(t)
	seen := map[string]bool{}
	for range 50 {
		tk, err := s.Issue(context.Background(), keyA)
		if err != nil {
			t.Fatal(err)
		}
		if seen[tk] {
			t.Fatalf("ticket %s issued twice", tk)
		}
		seen[tk] = true
	}
}

func TestIssueRefusesBadKey(t *testing.T) {
	s, rdb, prefix := newStore(t)
	for _, k := range []string{"", "abc", strings.ToUpper(keyA), keyA + "0"} {
		if _, err := s.Issue(context.Background(), k); !errors.Is(err, identity.ErrBadKey) {
			t.Errorf("Issue(%q) err = %v, want ErrBadKey", k, err)
		}
	}
	if keys := redistest.Keys(t, rdb, prefix); len(keys) != 0 {
		t.Fatalf("keys written for bad keys: %v", keys)
	}
}

func TestClaimIsSingleUse(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := context.Background()
	tk, err := s.Issue(ctx, keyA)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, tk, keyA); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if err := s.Claim(ctx, tk, keyA); !errors.Is(err, tickets.ErrUnknownTicket) {
		t.Fatalf("second claim err = %v, want ErrUnknownTicket", err)
	}
	// What is left is the key's count of claims this minute, expiring.
	for _, k := range redistest.Keys(t, rdb, prefix) {
		if !strings.HasPrefix(k, "ticketrate:"+keyA+":") {
			t.Fatalf("claimed ticket left key %q", k)
		}
		if ttl := rdb.TTL(ctx, prefix+k).Val(); ttl <= 0 || ttl > 2*time.Minute {
			t.Fatalf("%s: TTL %v", k, ttl)
		}
	}
}

func TestClaimByForeignKeyDoesNotSpend(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	tk, err := s.Issue(ctx, keyA)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Claim(ctx, tk, keyB); !errors.Is(err, tickets.ErrForeignTicket) {
			t.Fatalf("foreign claim err = %v, want ErrForeignTicket", err)
		}
	}
	if err := s.Claim(ctx, tk, keyA); err != nil {
		t.Fatalf("owner claim after foreign attempts: %v", err)
	}
}

func TestClaimUnknownAndMalformed(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := context.Background()
	for _, tk := range []string{
		strings.Repeat("0", 32),              // well-formed, never issued
		"",                                   // empty
		"ABCDEF0123456789ABCDEF0123456789",   // uppercase
		strings.Repeat("0", 31),              // short
		"*",                                  // glob
		strings.Repeat("0", 32) + ":" + keyA, // key-ish injection
	} {
		if err := s.Claim(ctx, tk, keyA); !errors.Is(err, tickets.ErrUnknownTicket) {
			t.Errorf("Claim(%q) err = %v, want ErrUnknownTicket", tk, err)
		}
	}
	if keys := redistest.Keys(t, rdb, prefix); len(keys) != 0 {
		t.Fatalf("claims wrote keys: %v", keys)
	}
}

// An expired ticket is one Redis has dropped; PEXPIREAT in the past makes
// Redis drop it at once, with no waiting.
func TestClaimExpired(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := context.Background()
	tk, err := s.Issue(ctx, keyA)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpireAt(ctx, prefix+"ticket:"+tk, time.Unix(1, 0)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, tk, keyA); !errors.Is(err, tickets.ErrUnknownTicket) {
		t.Fatalf("claim of expired ticket err = %v, want ErrUnknownTicket", err)
	}
}

func TestClaimRaceHasOneWinner(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	tk, err := s.Issue(ctx, keyA)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.Claim(ctx, tk, keyA) })
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, tickets.ErrUnknownTicket):
			t.Errorf("unexpected err %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d claims won, want 1", wins)
	}
}

func TestTicketsArePrefixScoped(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	one, two := tickets.New(rdb, prefix+"one:"), tickets.New(rdb, prefix+"two:")
	tk, err := one.Issue(context.Background(), keyA)
	if err != nil {
		t.Fatal(err)
	}
	if err := two.Claim(context.Background(), tk, keyA); !errors.Is(err, tickets.ErrUnknownTicket) {
		t.Fatalf("claim under another prefix err = %v", err)
	}
	if err := one.Claim(context.Background(), tk, keyA); err != nil {
		t.Fatal(err)
	}
}

func TestRedisFailureIsNotARefusal(t *testing.T) {
	rdb, _ := redistest.Client(t)
	dead := redis.NewClient(rdb.Options())
	dead.Close()
	s := tickets.New(dead, "x:")
	if _, err := s.Issue(context.Background(), keyA); err == nil {
		t.Fatal("Issue on a closed client succeeded")
	}
	err := s.Claim(context.Background(), strings.Repeat("0", 32), keyA)
	if err == nil || errors.Is(err, tickets.ErrUnknownTicket) || errors.Is(err, tickets.ErrForeignTicket) {
		t.Fatalf("Claim on a closed client err = %v, want a store error", err)
	}
}
