package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/core/store"
)

// ErrRunning is returned by Run when the Listener is already running.
var ErrRunning = errors.New("intake: listener is already running")

// Stats counts what a Listener has done since New, for metrics.
type Stats struct {
	Connects      int64 // connections established with every LISTEN active
	Reconnects    int64 // of Connects, those that replaced a lost connection
	Failures      int64 // failed connect attempts and lost connections
	Notifications int64 // notices handed to Handler.Notify
	Skipped       int64 // notifications dropped: unknown channel or empty payload
	Polls         int64 // safety polls: Handler.CatchUp calls with "poll"
}

// Listener keeps one dedicated connection LISTENing on store.Channels and
// drives a Handler; see the package documentation. Build it with New.
type Listener struct {
	connect func(ctx context.Context) (*pgx.Conn, error)
	h       Handler
	opt     Options
	log     *slog.Logger
	jitter  func(n int64) int64 // backoff jitter, [0, n)

	running atomic.Bool

	connects, reconnects, failures, notifications, skipped, polls atomic.Int64
}

// New returns a Listener that drives h. connect must open a fresh, dedicated
// connection on every call — not one from a pool, and never one it has
// returned before, since the Listener closes each connection it gives up on.
// Connect directly to the database, not through a proxy that multiplexes
// sessions (LISTEN is per session).
func New(connect func(ctx context.Context) (*pgx.Conn, error), h Handler, opt Options) *Listener {
	if connect == nil || h == nil {
		panic("intake.New: connect and handler are required")
	}
	opt = opt.withDefaults()
	return &Listener{connect: connect, h: h, opt: opt, log: opt.Logger, jitter: randJitter}
}

// Stats returns the counters. It is safe to call at any time, from any
// goroutine.
func (l *Listener) Stats() Stats {
	return Stats{
		Connects:      l.connects.Load(),
		Reconnects:    l.reconnects.Load(),
		Failures:      l.failures.Load(),
		Notifications: l.notifications.Load(),
		Skipped:       l.skipped.Load(),
		Polls:         l.polls.Load(),
	}
}

// Run listens until ctx is cancelled and then returns nil, having closed its
// connection. A failure to connect or a lost connection is logged (attributes
// "err" and "attempt", the count of consecutive failures) and followed by a
// reconnect after a backoff delay, forever. The Handler is called only from
// this goroutine. Run starts no goroutine of its own, and before giving up a
// connection it waits (up to IOTimeout) for pgx to finish closing it, so
// nothing it caused outlives it. It returns ErrRunning, at once, if the
// Listener is already running.
func (l *Listener) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer l.running.Store(false)

	reason := ReasonConnect
	attempt := 0 // consecutive failures
	for ctx.Err() == nil {
		established, err := l.session(ctx, reason)
		if ctx.Err() != nil {
			break
		}
		if established {
			reason = ReasonReconnect
			attempt = 0
		}
		attempt++
		l.failures.Add(1)
		delay := backoff(attempt, l.opt.ReconnectMin, l.opt.ReconnectMax, l.jitter)
		l.log.LogAttrs(ctx, slog.LevelWarn, "intake: listener connection failed",
			slog.Any("err", err), slog.Int("attempt", attempt), slog.String("retry_in", delay.String()))
		if !sleep(ctx, delay) {
			break
		}
	}
	return nil
}

// session connects, LISTENs, has the Handler catch up and then serves
// notifications until the connection fails or ctx ends. established reports
// whether it got as far as the catch-up.
func (l *Listener) session(ctx context.Context, reason string) (established bool, err error) {
	conn, err := l.dial(ctx)
	if err != nil {
		return false, err
	}
	defer l.close(conn)
	if err := l.listen(ctx, conn); err != nil {
		return false, err
	}
	l.connects.Add(1)
	if reason == ReasonReconnect {
		l.reconnects.Add(1)
	}
	l.log.LogAttrs(ctx, slog.LevelInfo, "intake: listening",
		slog.String("reason", reason), slog.Int("pid", int(conn.PgConn().PID())))
	// Every LISTEN is active: anything committed from here on is queued for
	// this session, so a catch-up now leaves no gap.
	l.h.CatchUp(ctx, reason)
	return true, l.serve(ctx, conn)
}

func (l *Listener) dial(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opt.IOTimeout)
	defer cancel()
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if conn == nil {
		return nil, errors.New("connect: returned no connection")
	}
	return conn, nil
}

// listen subscribes conn to every channel in one round trip.
func (l *Listener) listen(ctx context.Context, conn *pgx.Conn) error {
	var sql strings.Builder
	for _, ch := range store.Channels {
		sql.WriteString("LISTEN " + pgx.Identifier{ch}.Sanitize() + ";")
	}
	ctx, cancel := context.WithTimeout(ctx, l.opt.IOTimeout)
	defer cancel()
	if err := conn.PgConn().Exec(ctx, sql.String()).Close(); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return nil
}

// serve waits for notifications, breaking off the wait when a safety poll or
// a ping is due. It returns when the connection fails or ctx ends.
func (l *Listener) serve(ctx context.Context, conn *pgx.Conn) error {
	now := time.Now()
	nextPoll := now.Add(l.opt.PollInterval)
	nextPing := now.Add(l.opt.PingInterval)
	for {
		if !time.Now().Before(nextPoll) {
			l.polls.Add(1)
			l.h.CatchUp(ctx, ReasonPoll)
			nextPoll = time.Now().Add(l.opt.PollInterval)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !time.Now().Before(nextPing) {
			if err := l.ping(ctx, conn); err != nil {
				return err
			}
			nextPing = time.Now().Add(l.opt.PingInterval)
		}

		// A wait cut short by its own deadline leaves the connection usable:
		// pgx closes it only on errors other than timeouts.
		wait, cancel := context.WithDeadline(ctx, earlier(nextPoll, nextPing))
		n, err := conn.WaitForNotification(wait)
		timedOut := wait.Err() != nil
		cancel()
		if n != nil {
			l.deliver(ctx, n)
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case timedOut && !conn.IsClosed():
			// A poll or a ping is due.
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

func (l *Listener) ping(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, l.opt.IOTimeout)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// deliver hands n to the Handler, or logs and drops it.
func (l *Listener) deliver(ctx context.Context, n *pgconn.Notification) {
	kind, ok := KindOf(n.Channel)
	if !ok || n.Payload == "" {
		l.skipped.Add(1)
		why := "unknown channel"
		if ok {
			why = "empty payload"
		}
		payload := n.Payload
		if len(payload) > 100 {
			payload = payload[:100] + "…"
		}
		l.log.LogAttrs(ctx, slog.LevelWarn, "intake: notification skipped",
			slog.String("why", why), slog.String("channel", n.Channel), slog.String("payload", payload))
		return
	}
	notice := Notice{Kind: kind, RunID: n.Payload}
	if kind == Queued {
		id, r, err := store.ParseQueuedPayload(n.Payload)
		if id == "" {
			l.skipped.Add(1)
			l.log.LogAttrs(ctx, slog.LevelWarn, "intake: notification skipped",
				slog.String("why", "no run id"), slog.String("channel", n.Channel), slog.Any("err", err))
			return
		}
		if err != nil {
			// The id stands; the handler reads the row.
			l.log.LogAttrs(ctx, slog.LevelWarn, "intake: queued notice unreadable past its run id",
				slog.String("run_id", id), slog.Any("err", err))
		}
		notice.RunID, notice.Run = id, r
	}
	l.notifications.Add(1)
	l.h.Notify(ctx, notice)
}

// close closes conn and waits, bounded, for pgx to finish cleaning it up:
// after a failed query pgx closes the socket from a goroutine of its own,
// which may sit draining a dead socket, so the socket is closed here too.
func (l *Listener) close(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), l.opt.IOTimeout)
	defer cancel()
	_ = conn.Close(ctx)
	pc := conn.PgConn()
	_ = pc.Conn().Close() // usually already closed; the error says only that
	select {
	case <-pc.CleanupDone():
	case <-ctx.Done():
		l.log.LogAttrs(ctx, slog.LevelWarn, "intake: connection cleanup did not finish",
			slog.String("waited", l.opt.IOTimeout.String()))
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
