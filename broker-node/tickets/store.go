// Package tickets is admission for provider links (design.md D11 and
// §The provider wire): POST /tickets issues a single-use ticket bound to the
// caller's public key, and the handshake claims it. Tickets live in Redis, so
// any broker node can issue one and the leader can claim it.
package tickets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/identity"
)

// TTL is how long an issued ticket stays claimable.
const TTL = 60 * time.Second

// TicketHexLen is the length of a ticket: 128 random bits as lowercase hex.
const TicketHexLen = 32

// Claim refusals. A Redis failure is neither: it is returned wrapped as is.
var (
	// ErrUnknownTicket: no such ticket — never issued, already claimed or expired.
	ErrUnknownTicket = errors.New("tickets: unknown or expired ticket")
	// ErrForeignTicket: the ticket was issued to another key. It is not spent,
	// so a stranger who saw a ticket cannot burn it.
	ErrForeignTicket = errors.New("tickets: ticket was issued to another key")
)

// Store issues and claims tickets in Redis under prefix+"ticket:"+ticket, the
// value being the public key it was issued to. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	// Now is the clock that names the minute a claim is counted in
	// (time.Now if nil); set it before use.
	Now func() time.Time
}

// New returns a Store on rdb whose keys all start with prefix.
func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix}
}

// addr is the address of the Redis the Store is on, as configured ("":
// not a single server's client).
func (s *Store) addr() string {
	if c, ok := s.rdb.(*redis.Client); ok {
		return c.Options().Addr
	}
	return ""
}

func (s *Store) key(ticket string) string { return s.prefix + "ticket:" + ticket }

// Issue creates a ticket for publicKeyHex (64 lowercase hex chars; otherwise
// the error wraps identity.ErrBadKey), claimable once within TTL.
func (s *Store) Issue(ctx context.Context, publicKeyHex string) (string, error) {
	if _, err := identity.ParsePublicKey(publicKeyHex); err != nil {
		return "", fmt.Errorf("tickets: issue: %w", err)
	}
	// A collision of 128 random bits does not happen; SET NX makes sure a
	// live ticket is never overwritten even so.
	for range 3 {
		var b [TicketHexLen / 2]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
		ticket := hex.EncodeToString(b[:])
		ok, err := s.rdb.SetNX(ctx, s.key(ticket), publicKeyHex, TTL).Result()
		if err != nil {
			return "", fmt.Errorf("tickets: issue: %w", err)
		}
		if ok {
			return ticket, nil
		}
	}
	return "", errors.New("tickets: issue: could not draw an unused ticket")
}

// claimScript: 0 = absent, -1 = issued to another key (left in place),
// 1 = claimed (deleted, and counted in the key's minute KEYS[2], which
// expires after ARGV[2] seconds).
var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
`)

// Claim spends ticket for publicKeyHex, atomically. It returns
// ErrUnknownTicket when the ticket is absent or expired (or cannot be a
// ticket at all), ErrForeignTicket — without spending it — when it was issued
// to another key, and nil once it is spent. A spent ticket counts towards
// its key's tickets this minute (see over). Any other error is Redis's,
// wrapped.
func (s *Store) Claim(ctx context.Context, ticket, publicKeyHex string) error {
	if !isTicket(ticket) {
		return ErrUnknownTicket
	}
	keys := []string{s.key(ticket), s.rateKey(publicKeyHex, s.minute(s.now()))}
	n, err := claimScript.Run(ctx, s.rdb, keys, publicKeyHex, int(rateTTL/time.Second)).Int()
	if err != nil {
		return fmt.Errorf("tickets: claim: %w", err)
	}
	switch n {
	case 1:
		return nil
	case -1:
		return ErrForeignTicket
	default:
		return ErrUnknownTicket
	}
}

// isTicket reports whether t has the shape Issue gives tickets, so that
// arbitrary client strings never become Redis keys.
func isTicket(t string) bool {
	if len(t) != TicketHexLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// rateTTL is how long a key's count of one minute is kept: past the minute.
const rateTTL = 2 * time.Minute

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Store) minute(t time.Time) int64 { return t.Unix() / 60 }

func (s *Store) rateKey(publicKeyHex string, minute int64) string {
	return fmt.Sprintf("%sticketrate:%s:%d", s.prefix, publicKeyHex, minute)
}

// over returns 0 while publicKeyHex has claimed fewer than perMinute
// tickets in now's minute, else the seconds left in the minute. Only claims
// count, never requests: POST /tickets is unauthenticated, so a count of
// requests would let a stranger asking in an honest key's name use up that
// key's allowance and lock it out, while a claim takes the key's own proof
// (handshake.Accept checks it first).
func (s *Store) over(ctx context.Context, publicKeyHex string, perMinute int, now time.Time) (retryAfter int, err error) {
	minute := s.minute(now)
	n, err := s.rdb.Get(ctx, s.rateKey(publicKeyHex, minute)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("tickets: rate: %w", err)
	}
	if n < int64(perMinute) {
		return 0, nil
	}
	return int((minute+1)*60 - now.Unix()), nil
}
