package console

import (
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxGuessers bounds the clients whose guesses are tracked at once. When
// that many are still paying off their guesses, a new client's token is
// not compared either: guesses spread over made-up addresses stay bounded.
const maxGuessers = 4096

// maxDebt is how far below zero a client's guesses may go: an hour's
// refill, so a client that sent many wrong tokens at once waits at most
// that long.
const maxDebt = -60 * GuessesPerMinute

// guessRate is the refill of a client's guesses.
var guessRate = rate.Every(time.Minute / GuessesPerMinute)

// guesses bounds the tokens a client may try (docs/design.md §Deployment):
// each wrong one costs one of its GuessBurst, which refill at
// GuessesPerMinute (a token bucket per client, golang.org/x/time/rate); a
// client out of them is answered 429 without its token being compared, so
// it learns nothing from it. A right token costs nothing, so an operator's
// scripts are held up only after wrong tokens from their own address,
// however many requests they have in flight. Guesses in flight together
// are all compared, but each is paid for: the budget goes below zero (to
// maxDebt), so the long-run rate stays bounded. The bound is this node's;
// on AWS the load balancer sends the console to the leader alone.
type guesses struct {
	mu      sync.Mutex
	now     func() time.Time
	log     *slog.Logger
	clients map[string]*guesser
}

type guesser struct {
	lim    *rate.Limiter
	warned bool // logged as out of guesses, until it has one again
}

func newGuesser() *guesser {
	return &guesser{lim: rate.NewLimiter(guessRate, GuessBurst)}
}

// allow: client has a guess left (one is spent only by failed); when not,
// how long until it has one.
func (g *guesses) allow(client string) (retry time.Duration, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	c := g.clients[client]
	if c == nil {
		if len(g.clients) >= maxGuessers {
			for k, o := range g.clients {
				if o.lim.TokensAt(now) >= GuessBurst {
					delete(g.clients, k)
				}
			}
		}
		if len(g.clients) >= maxGuessers {
			g.log.Warn("console: too many clients guessing the token; refusing new ones", "client", client)
			return time.Minute / GuessesPerMinute, false
		}
		c = newGuesser()
		g.clients[client] = c
	}
	if left := c.lim.TokensAt(now); left < 1 {
		if !c.warned { // once per spell, not per request: a stranger may not fill the log
			g.log.Warn("console: a client is out of token guesses", "client", client, "per_minute", GuessesPerMinute)
			c.warned = true
		}
		return time.Duration(math.Ceil((1 - left) / GuessesPerMinute * float64(time.Minute))), false
	}
	c.warned = false
	return 0, true
}

// failed spends a guess of client's: a wrong token was compared.
func (g *guesses) failed(client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	c := g.clients[client]
	if c == nil { // forgotten meanwhile, its budget full again
		c = newGuesser()
		g.clients[client] = c
	}
	if c.lim.TokensAt(now) > maxDebt {
		c.lim.ReserveN(now, 1) // taken even when it must be waited for: the debt
	}
}

// client is who guesses: the address the load balancer appended to
// X-Forwarded-For (the last entry; what the client put before it is its
// own claim), else the peer's. The header is believed only from a peer on
// a private or loopback address: on AWS only the load balancer, inside
// the VPC, reaches a node (infra/broker.yaml, NodeSecurityGroup); a
// stranger reaching a node's public address directly would name itself
// anew on every request. An IPv6 client is its /64, which one host
// commonly holds whole.
func client(r *http.Request) string {
	peer := r.RemoteAddr
	if host, _, err := net.SplitHostPort(peer); err == nil {
		peer = host
	}
	addr := peer
	if ip := net.ParseIP(peer); ip != nil && (ip.IsPrivate() || ip.IsLoopback()) {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			if fwd := strings.TrimSpace(last[strings.LastIndexByte(last, ',')+1:]); net.ParseIP(fwd) != nil {
				addr = fwd
			}
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
