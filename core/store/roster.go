package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrFingerprintTaken: another key already holds this key's fingerprint.
var ErrFingerprintTaken = errors.New("provider fingerprint taken by another key")

// ErrAgentInUse: the agent has a conversation behind it and cannot be deleted.
var ErrAgentInUse = errors.New("agent has a conversation behind it")

// registerConflicts bounds RegisterAgents' attempts that meet their own
// key's row on the fingerprint's unique index.
const registerConflicts = 3

// RegisterAgents records a provider and the agents a link registered, under
// the broker's epoch, and marks them served by that epoch. It returns
// ErrFingerprintTaken only when another key holds p's fingerprint.
func (s *Store) RegisterAgents(ctx context.Context, epoch int64, p Provider, agents []Agent) error {
	for attempt := 1; ; attempt++ {
		err := s.registerAgents(ctx, epoch, p, agents)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "providers_fingerprint_key" {
			return err
		}
		// Two first registers of one key at once both pass the insert's
		// check on the primary key before either row is indexed; the later
		// then meets the earlier's row on the fingerprint, which the
		// upsert has no arbiter for. That row, committed by now, is this
		// key's: the attempt again updates it (design.md §Two processes of
		// one key).
		var holder string
		herr := s.pool.QueryRow(ctx, `SELECT public_key FROM providers WHERE fingerprint = $1`, p.Fingerprint).Scan(&holder)
		switch {
		case herr == nil && holder != p.PublicKey:
			return fmt.Errorf("register %s: %w", p.PublicKey, ErrFingerprintTaken)
		case herr != nil && !errors.Is(herr, pgx.ErrNoRows):
			return fmt.Errorf("register %s: who holds its fingerprint: %w", p.PublicKey, herr)
		case attempt == registerConflicts:
			return fmt.Errorf("register %s: met its own fingerprint %d times: %w", p.PublicKey, attempt, err)
		}
	}
}

func (s *Store) registerAgents(ctx context.Context, epoch int64, p Provider, agents []Agent) error {
	return s.inTx(ctx, "register agents of "+p.PublicKey, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO providers (public_key, fingerprint, display_name) VALUES ($1, $2, nullif($3, ''))
			ON CONFLICT (public_key) DO UPDATE
			SET display_name = coalesce(excluded.display_name, providers.display_name), updated_at = now()`,
			p.PublicKey, p.Fingerprint, p.DisplayName); err != nil {
			return err
		}
		for _, a := range agents {
			if _, err := tx.Exec(ctx, `
				INSERT INTO agents (provider_key, name, description, agent_card_extra, metadata, takes_interjections,
				                    served_epoch, unserved_since)
				VALUES ($1, $2, $3, coalesce($4::jsonb, '{}'), coalesce($5::jsonb, '{}'), $6, $7, NULL)
				ON CONFLICT (provider_key, name) DO UPDATE SET
					description = excluded.description, agent_card_extra = excluded.agent_card_extra,
					metadata = excluded.metadata, takes_interjections = excluded.takes_interjections,
					served_epoch = excluded.served_epoch, unserved_since = NULL, last_seen_at = now()`,
				a.ProviderKey, a.Name, a.Description, nullJSON(a.AgentCardExtra), nullJSON(a.Metadata),
				a.TakesInterjections, epoch); err != nil {
				return err
			}
		}
		return nil
	})
}

// MarkServed records that these agents of key are served under epoch.
func (s *Store) MarkServed(ctx context.Context, epoch int64, key string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	return s.inTx(ctx, "mark agents of "+key+" served", func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE agents SET served_epoch = $3, unserved_since = NULL, back_until = NULL
			WHERE provider_key = $1 AND name = ANY($2)`, key, names, epoch)
		return err
	})
}

// MarkUnserved records that nobody serves these agents of key any more.
func (s *Store) MarkUnserved(ctx context.Context, epoch int64, key string, names []string) error {
	return s.markUnserved(ctx, epoch, key, names, 0)
}

// MarkLost records that these agents of key went unserved because their
// link was lost without a close frame: their provider is expected back
// for grace (the link grace, D5), also by a leader taking over meanwhile
// (ForgetServedBefore).
func (s *Store) MarkLost(ctx context.Context, epoch int64, key string, names []string, grace time.Duration) error {
	return s.markUnserved(ctx, epoch, key, names, grace)
}

func (s *Store) markUnserved(ctx context.Context, epoch int64, key string, names []string, grace time.Duration) error {
	if len(names) == 0 {
		return nil
	}
	return s.inTx(ctx, "mark agents of "+key+" unserved", func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE agents SET served_epoch = NULL, unserved_since = now(),
			back_until = CASE WHEN $3 > 0 THEN now() + make_interval(secs => $3::float8 / 1000) END
			WHERE provider_key = $1 AND name = ANY($2) AND served_epoch IS NOT NULL`, key, names, grace.Milliseconds())
		return err
	})
}

// ServedAgent names one agent an older epoch's roster served.
type ServedAgent struct{ ProviderKey, Name string }

// ForgetServedBefore marks unserved every agent an older epoch said it
// served: a new leader's roster starts empty. It returns those agents, and
// those whose link was lost within its grace (MarkLost) when the previous
// leader went away: the ones whose providers are expected back. That
// moment is up to lookback (the lease TTL) before now, since the new
// leader took over only once the old lease had lapsed; a grace still
// running then counts even if it ended during the wait for the lease.
// The agents returned are expected back for grace (provider_grace), which
// is recorded with them (back_until) so a leader taking over from this one
// before they are back expects them too.
func (s *Store) ForgetServedBefore(ctx context.Context, epoch int64, lookback, grace time.Duration) ([]ServedAgent, error) {
	var out []ServedAgent
	err := s.inTx(ctx, "forget older rosters", func(tx pgx.Tx) error {
		out = nil
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `WITH f AS (UPDATE agents SET served_epoch = NULL, unserved_since = now()
			WHERE served_epoch IS NOT NULL AND served_epoch <> $1 RETURNING provider_key, name)
			SELECT provider_key, name FROM f
			UNION SELECT provider_key, name FROM agents WHERE served_epoch IS NULL
				AND back_until > now() - make_interval(secs => $2::float8 / 1000)`, epoch, lookback.Milliseconds())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ServedAgent, error) {
			var a ServedAgent
			return a, row.Scan(&a.ProviderKey, &a.Name)
		})
		if err != nil {
			return err
		}
		if grace > 0 && len(out) > 0 {
			// This leader expects them for grace; should it go away before
			// they are back, the next one expects them for what is left.
			keys, names := make([]string, len(out)), make([]string, len(out))
			for i, a := range out {
				keys[i], names[i] = a.ProviderKey, a.Name
			}
			if _, err := tx.Exec(ctx, `UPDATE agents a SET back_until = greatest(a.back_until, now() + make_interval(secs => $3::float8 / 1000))
				FROM unnest($1::text[], $2::text[]) AS e(provider_key, name)
				WHERE a.provider_key = e.provider_key AND a.name = e.name AND a.served_epoch IS NULL`,
				keys, names, grace.Milliseconds()); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `UPDATE llm_offerings SET served_epoch = NULL
			WHERE served_epoch IS NOT NULL AND served_epoch <> $1`, epoch)
		return err
	})
	return out, err
}

// DeleteAgent removes an agent record, refusing one with any thread or run.
func (s *Store) DeleteAgent(ctx context.Context, epoch int64, key, name string) error {
	return s.inTx(ctx, "delete agent "+name, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		var history bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM threads WHERE provider_key = $1 AND agent_name = $2)
			OR EXISTS (SELECT 1 FROM runs WHERE provider_key = $1 AND agent_name = $2)`, key, name).Scan(&history); err != nil {
			return err
		}
		if history {
			return ErrAgentInUse
		}
		tag, err := tx.Exec(ctx, `DELETE FROM agents WHERE provider_key = $1 AND name = $2`, key, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// AgentInfo is an agent as listed.
type AgentInfo struct {
	Agent
	Online bool // served by the current leader's roster
}

// ListAgents lists every registered agent, whole; Online means the
// current leader's roster serves it. For tests and tools: GET /agents
// reads AgentsPage, bounded.
func (s *Store) ListAgents(ctx context.Context) ([]AgentInfo, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT a.provider_key, a.name, a.description, a.agent_card_extra, a.metadata, a.takes_interjections,
		       `+agentOnline+`
		FROM agents a CROSS JOIN broker_leader l CROSS JOIN broker_heartbeat h
		ORDER BY a.provider_key, a.name`)
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AgentInfo, error) {
		var a AgentInfo
		var extra, meta []byte
		err := row.Scan(&a.ProviderKey, &a.Name, &a.Description, &extra, &meta, &a.TakesInterjections, &a.Online)
		a.AgentCardExtra, a.Metadata = extra, meta
		return a, err
	})
}

// agentOnline is an agent's online in a query over agents a, broker_leader
// l and broker_heartbeat h: served under the current epoch by a leader
// whose heartbeat is alive (D8).
const agentOnline = `a.served_epoch IS NOT NULL AND a.served_epoch = l.epoch AND h.epoch = l.epoch AND h.alive_until > now()`

// AgentPageQuery says which page of the agent listing to read.
type AgentPageQuery struct {
	// HiddenAfter leaves out the agents nobody has served for that long
	// (0: none left out): those no roster serves whose last register and
	// last going unserved are both older (design.md D8: a record is kept
	// after its link goes, but a key's records, a stranger's too, are not
	// listed for ever).
	HiddenAfter time.Duration
	// AfterKey and AfterName are the place the page starts after: the last
	// agent of the page before ("" and "": the first page). They need not
	// name an agent that exists.
	AfterKey, AfterName string
	// Limit caps the page's agents (at least 1).
	Limit int
	// MaxBytes bounds the page's agents as JSON (AgentPageBytes each); a
	// page holds its first agent whatever its size, or paging would stop.
	MaxBytes int
}

// AgentPage is one page of the agent listing, in (provider key, name)
// order.
type AgentPage struct {
	Agents []AgentInfo // without AgentCardExtra, which the listing does not show
	More   bool        // listed agents follow the last of Agents
}

// AgentPageBytes is what AgentsPage counts for one agent against MaxBytes:
// its description as a JSON string, its metadata and name as stored, and
// this much for the rest of its entry (its key, fingerprint, field names).
const AgentPageBytes = 160

// AgentsPage reads one page of the agents GET /agents lists (design.md
// §The doors, "GET /agents is paged"): those after q's place in (provider
// key, name) order, up to q.Limit of them and q.MaxBytes. The cut is made
// in PostgreSQL, walking the agents' primary key from the place, so a page
// reads what it returns and the records hidden between them; the window
// adds each agent's bytes up; the outer filter stops one row past the
// page, whose content is not sent: it tells there is more.
func (s *Store) AgentsPage(ctx context.Context, q AgentPageQuery) (AgentPage, error) {
	if q.Limit < 1 {
		q.Limit = 1
	}
	rows, err := s.pool.Query(ctx, `
		SELECT provider_key, name, CASE WHEN fits THEN description END, CASE WHEN fits THEN metadata END,
		       takes_interjections, online, fits
		FROM (SELECT *, rn <= $4 AND (rn = 1 OR total <= $5) AS fits
			FROM (SELECT p.*, row_number() OVER w AS rn, sum(p.n) OVER w AS total
				FROM (SELECT a.provider_key, a.name, a.description, a.metadata, a.takes_interjections,
						`+agentOnline+` AS online,
						octet_length(to_json(a.description)::text) + octet_length(a.metadata::text) + octet_length(a.name) + $6 AS n
					FROM agents a CROSS JOIN broker_leader l CROSS JOIN broker_heartbeat h
					WHERE (a.provider_key, a.name) > ($2::text, $3::text)
					  AND ($1::bigint <= 0 OR a.served_epoch IS NOT NULL
					       OR greatest(a.last_seen_at, a.unserved_since) > now() - make_interval(secs => $1::float8 / 1000))
					ORDER BY a.provider_key, a.name LIMIT $4::int + 1) p
				WINDOW w AS (ORDER BY p.provider_key, p.name ROWS UNBOUNDED PRECEDING)) summed
			WHERE rn = 1 OR total - n <= $5) cut
		ORDER BY provider_key, name`,
		q.HiddenAfter.Milliseconds(), q.AfterKey, q.AfterName, q.Limit, q.MaxBytes, AgentPageBytes)
	if err != nil {
		return AgentPage{}, fmt.Errorf("list agents: %w", err)
	}
	defer rows.Close()
	var p AgentPage
	for rows.Next() {
		var (
			a    AgentInfo
			desc *string
			meta []byte
			fits bool
		)
		if err := rows.Scan(&a.ProviderKey, &a.Name, &desc, &meta, &a.TakesInterjections, &a.Online, &fits); err != nil {
			return AgentPage{}, fmt.Errorf("list agents: %w", err)
		}
		if !fits {
			p.More = true
			break
		}
		a.Description, a.Metadata = *desc, meta
		p.Agents = append(p.Agents, a)
	}
	if err := rows.Err(); err != nil {
		return AgentPage{}, fmt.Errorf("list agents: %w", err)
	}
	return p, nil
}
