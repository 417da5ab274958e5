package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// Floors are what the machine itself does, measured in the same run.
type Floors struct {
	PGTxPerSec      float64 `json:"pg_insert_notify_tx_per_s"`
	NotifyRTTP50    float64 `json:"notify_rtt_p50_ms"`
	NotifyRTTP99    float64 `json:"notify_rtt_p99_ms"`
	WSRTTP50        float64 `json:"ws_rtt_p50_ms"`
	WSRTTP99        float64 `json:"ws_rtt_p99_ms"`
	PGTxConcurrency int     `json:"pg_tx_concurrency"`
	// RunStorePerSec is runStoreFloor: a whole run's storage steps alone.
	RunStorePerSec float64 `json:"run_store_runs_per_s,omitempty"`
	// NoticePathP50/P99: door accepted → NOTIFY read, store calls alone,
	// one run at a time on the idle machine (ms): what a run frame waits
	// for. OfferPathP50/P99 go on to the offering write returned, which
	// the broker makes beside the frame.
	NoticePathP50 float64 `json:"notice_path_p50_ms,omitempty"`
	NoticePathP99 float64 `json:"notice_path_p99_ms,omitempty"`
	OfferPathP50  float64 `json:"offer_path_p50_ms,omitempty"`
	OfferPathP99  float64 `json:"offer_path_p99_ms,omitempty"`
}

const scratchDDL = `CREATE TABLE IF NOT EXISTS load_scratch (id bigserial PRIMARY KEY, payload text NOT NULL, at timestamptz NOT NULL DEFAULT now())`

// pgFloor measures insert+NOTIFY transactions/s with conc writers, each
// transaction one INSERT into a scratch table and one NOTIFY, as a door's
// start does, pipelined (insertNotify).
func pgFloor(ctx context.Context, dbURL string, conc int, d time.Duration) (float64, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = int32(conc)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, scratchDDL); err != nil {
		return 0, err
	}
	var n atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				err := insertNotify(ctx, pool, "load_scratch", "x")
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return 0, e
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// insertNotify is the floor's transaction: BEGIN, one INSERT into the
// scratch table, one pg_notify, COMMIT — pipelined in one round trip, the
// fastest way to send it (as the doors and the broker send theirs).
func insertNotify(ctx context.Context, db interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, channel, payload string) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(`INSERT INTO load_scratch (payload) VALUES ($1)`, payload)
	b.Queue(`SELECT pg_notify($1, $2)`, channel, payload)
	b.Queue("COMMIT")
	return db.SendBatch(ctx, b).Close()
}

// notifyRTT measures a committed insert+NOTIFY until a listener on another
// connection has it, one at a time.
func notifyRTT(ctx context.Context, dbURL string, d time.Duration) (*hist, error) {
	p, err := newRTTPair(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer p.close()
	h := &hist{}
	stop := time.Now().Add(d)
	for i := 0; time.Now().Before(stop) && i < 5000; i++ {
		rtt, err := p.once(ctx)
		if err != nil {
			return nil, err
		}
		h.add(rtt)
	}
	return h, nil
}

// rttPair is a writer and a listener connection for NOTIFY round trips.
type rttPair struct {
	lc, wc *pgx.Conn
	n      int
}

func newRTTPair(ctx context.Context, dbURL string) (*rttPair, error) {
	lc, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	wc, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		lc.Close(context.Background())
		return nil, err
	}
	p := &rttPair{lc: lc, wc: wc}
	if _, err := wc.Exec(ctx, scratchDDL); err != nil {
		p.close()
		return nil, err
	}
	if _, err := lc.Exec(ctx, `LISTEN load_rtt`); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *rttPair) close() {
	p.lc.Close(context.Background())
	p.wc.Close(context.Background())
}

// once is one round trip: the transaction sent until the listener has it.
func (p *rttPair) once(ctx context.Context) (time.Duration, error) {
	p.n++
	want := strconv.Itoa(p.n)
	t0 := time.Now()
	if err := insertNotify(ctx, p.wc, "load_rtt", want); err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		nf, err := p.lc.WaitForNotification(wctx)
		if err != nil {
			return 0, fmt.Errorf("notify round trip: %w", err)
		}
		if nf.Payload == want {
			return time.Since(t0), nil
		}
	}
}

// loadedRTT measures the NOTIFY round trip once every every while a phase
// runs, until stop is called: the floor under the phase's own load, for the
// tail it shares with dispatch. A round trip is a small fraction of the
// phase's own transactions at this pace.
func loadedRTT(ctx context.Context, dbURL string, every time.Duration) (stop func() *hist, err error) {
	p, err := newRTTPair(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	h := &hist{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer p.close()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rtt, err := p.once(ctx)
			if err != nil {
				return // the phase's figure stands without it; ctx ended, or PostgreSQL failed
			}
			h.add(rtt)
		}
	}()
	return func() *hist { cancel(); <-done; return h }, nil
}

// wsRTT measures a small frame's round trip over a loopback WebSocket.
func wsRTT(ctx context.Context, d time.Duration) (*hist, error) {
	up := websocket.Upgrader{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			if c.WriteMessage(mt, b) != nil {
				return
			}
		}
	}), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c, _, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+ln.Addr().String()+"/", nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	msg := []byte(`{"type":"event","runId":"run_x","event":{"type":"CUSTOM","name":"ping"}}`)
	h := &hist{}
	stop := time.Now().Add(d)
	for i := 0; time.Now().Before(stop) && i < 20000; i++ {
		t0 := time.Now()
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			return nil, err
		}
		if _, _, err := c.ReadMessage(); err != nil {
			return nil, err
		}
		h.add(time.Since(t0))
	}
	return h, nil
}

func measureFloors(ctx context.Context, dbURL string, conc int, d time.Duration) (Floors, error) {
	var f Floors
	f.PGTxConcurrency = conc
	tps, err := pgFloor(ctx, dbURL, conc, d)
	if err != nil {
		return f, fmt.Errorf("insert+NOTIFY floor: %w", err)
	}
	f.PGTxPerSec = tps
	nh, err := notifyRTT(ctx, dbURL, d)
	if err != nil {
		return f, err
	}
	f.NotifyRTTP50, f.NotifyRTTP99 = nh.ms(0.50), nh.ms(0.99)
	wh, err := wsRTT(ctx, d)
	if err != nil {
		return f, fmt.Errorf("websocket floor: %w", err)
	}
	f.WSRTTP50, f.WSRTTP99 = wh.ms(0.50), wh.ms(0.99)
	return f, nil
}

// storeFloor is the raw rate of storing one run's events the way the broker
// does: store.AppendProviderEvents (the fence, the provider-seq dedupe, the
// seq reservation and the multi-row insert, one transaction per batch) from
// one connection, into a scratch run on the same database, n events in
// batches of batch, each a copy of sample (the stream's own stored event),
// with provider seqs when the stream's events carried them. The scratch run
// is created completed, in the thread and for the agent of run like, so no
// lane offers it. Events/s.
func storeFloor(ctx context.Context, dbURL, like string, n, batch int, sample json.RawMessage, withPseq bool) (float64, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	runID := run.NewRunID()
	var epoch int64
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO runs (run_id, thread_id, provider_key, agent_name, status, run_input, completed_at)
			SELECT $1, thread_id, provider_key, agent_name, 'completed', '{}', now() FROM runs WHERE run_id = $2`, runID, like); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT epoch FROM broker_leader WHERE id = 1`).Scan(&epoch)
	})
	if err != nil {
		return 0, fmt.Errorf("store floor: scratch run: %w", err)
	}
	st := store.New(pool, nil)
	evs := make([]store.NewEvent, 0, batch)
	start := time.Now()
	for i := 0; i < n; {
		evs = evs[:0]
		for ; len(evs) < batch && i < n; i++ {
			e := store.NewEvent{Event: sample}
			if withPseq {
				p := int64(i + 1)
				e.ProviderSeq = &p
			}
			evs = append(evs, e)
		}
		if _, err := st.AppendProviderEvents(ctx, epoch, runID, evs); err != nil {
			return 0, fmt.Errorf("store floor: %w", err)
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
