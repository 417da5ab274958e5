package console

import (
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxGuessers bounds the clients whose guesses are tracked at once. When
// that many are still paying off their guesses, a new client's token is
// not compared either: guesses spread over made-up addresses stay bounded.
const maxGuessers = 4096

// guesses bounds the tokens a client may try (docs/design.md §Deployment):
// each wrong one costs one of its GuessBurst, which refill at
// GuessesPerMinute; a client out of them is answered 429 without its token
// being compared, so it learns nothing from it. A right token costs
// nothing, so an operator's scripts are held up only after wrong tokens
// from their own address, however many requests they have in flight.
// Guesses in flight together are all compared, but each is paid for: the
// budget goes below zero (to an hour's refill at most), so the long-run
// rate stays bounded. The bound is this node's; on AWS the load balancer
// sends the console to the leader alone.
type guesses struct {
	mu      sync.Mutex
	now     func() time.Time
	log     *slog.Logger
	clients map[string]*bucket
}

type bucket struct {
	left   float64
	at     time.Time
	warned bool // logged as out of guesses, until it has one again
}

// refill brings b up to now.
func (b *bucket) refill(now time.Time) {
	b.left = math.Min(GuessBurst, b.left+now.Sub(b.at).Minutes()*GuessesPerMinute)
	b.at = now
}

// allow: client has a guess left (one is spent only by failed); when not,
// how long until it has one.
func (g *guesses) allow(client string) (retry time.Duration, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	b := g.clients[client]
	if b == nil {
		if len(g.clients) >= maxGuessers {
			for c, o := range g.clients {
				if o.refill(now); o.left >= GuessBurst {
					delete(g.clients, c)
				}
			}
		}
		if len(g.clients) >= maxGuessers {
			g.log.Warn("console: too many clients guessing the token; refusing new ones", "client", client)
			return time.Minute / GuessesPerMinute, false
		}
		b = &bucket{left: GuessBurst, at: now}
		g.clients[client] = b
	}
	b.refill(now)
	if b.left < 1 {
		if !b.warned { // once per spell, not per request: a stranger may not fill the log
			g.log.Warn("console: a client is out of token guesses", "client", client, "per_minute", GuessesPerMinute)
			b.warned = true
		}
		return time.Duration(math.Ceil((1 - b.left) / GuessesPerMinute * float64(time.Minute))), false
	}
	b.warned = false
	return 0, true
}

// failed spends a guess of client's: a wrong token was compared.
func (g *guesses) failed(client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.clients[client]
	if b == nil { // forgotten meanwhile, its budget full again
		b = &bucket{left: GuessBurst, at: g.now()}
		g.clients[client] = b
	}
	b.refill(g.now())
	b.left = math.Max(b.left-1, -60*GuessesPerMinute)
}

// client is who guesses: the address the load balancer appended to
// X-Forwarded-For (the last entry; what the client put before it is its
// own claim), else the peer's. On AWS only the load balancer reaches a
// node (infra/broker.yaml, NodeSecurityGroup). An IPv6 client is its /64,
// which one host commonly holds whole.
func client(r *http.Request) string {
	addr := ""
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		last := xff[len(xff)-1]
		addr = strings.TrimSpace(last[strings.LastIndexByte(last, ',')+1:])
	}
	if net.ParseIP(addr) == nil {
		addr = r.RemoteAddr
		if host, _, err := net.SplitHostPort(addr); err == nil {
			addr = host
		}
	}
	ip := net.ParseIP(addr)
	if ip == nil {
		return addr
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
