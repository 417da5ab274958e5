package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
)

// KYOK (issue 7): a run's sealed binding (written by the caller doors, read
// by the KYOK door, dropped by the broker when the run ends) and the LLM
// offerings the leader's relay serves (fenced by its epoch).

// ErrOfferingInUse: an LLM offering cannot be deleted while a live run is
// bound to it.
var ErrOfferingInUse = errors.New("a live run is bound to this offering")

// SetKyokBinding stores a run's sealed binding and the offering it names
// (door write; sealed comes from kyok.Seal). ErrNotFound for an unknown
// run, ErrRunEnded for a terminal one.
func (s *Store) SetKyokBinding(ctx context.Context, runID, llmProviderKey, llmName string, sealed []byte) error {
	if len(sealed) == 0 || llmProviderKey == "" || llmName == "" {
		return fmt.Errorf("set kyok binding of %s: a binding needs its offering and its sealed content", runID)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE runs SET kyok_binding = $2, kyok_llm_provider_key = $3, kyok_llm_name = $4
		WHERE run_id = $1 AND status <> ALL($5)`, runID, sealed, llmProviderKey, llmName, terminalStatuses())
	if err != nil {
		return fmt.Errorf("set kyok binding of %s: %w", runID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = $1)`, runID).Scan(&exists); err != nil {
		return fmt.Errorf("set kyok binding of %s: %w", runID, err)
	}
	if !exists {
		return fmt.Errorf("set kyok binding of %s: %w", runID, ErrNotFound)
	}
	return fmt.Errorf("set kyok binding of %s: %w", runID, ErrRunEnded)
}

func terminalStatuses() []string {
	return []string{string(run.Completed), string(run.Failed), string(run.Cancelled)}
}

// KyokRun is what the KYOK door checks about a run.
type KyokRun struct {
	RunID           string
	ProviderKey     string
	AgentName       string
	Status          run.Status
	CancelRequested bool
	ActorChain      json.RawMessage // nil: no chain
	// Sealed is the binding (nil: none), naming LLMProviderKey/LLMName.
	Sealed         []byte
	LLMProviderKey string
	LLMName        string
}

// GetKyokRun reads a run for the KYOK door. ErrNotFound for an unknown run.
func (s *Store) GetKyokRun(ctx context.Context, runID string) (KyokRun, error) {
	var k KyokRun
	var status string
	var chain []byte
	err := s.pool.QueryRow(ctx, `SELECT run_id, provider_key, agent_name, status, cancel_requested_by IS NOT NULL,
		actor_chain, kyok_binding, coalesce(kyok_llm_provider_key, ''), coalesce(kyok_llm_name, '')
		FROM runs WHERE run_id = $1`, runID).
		Scan(&k.RunID, &k.ProviderKey, &k.AgentName, &status, &k.CancelRequested, &chain, &k.Sealed,
			&k.LLMProviderKey, &k.LLMName)
	if errors.Is(err, pgx.ErrNoRows) {
		return KyokRun{}, fmt.Errorf("kyok run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return KyokRun{}, fmt.Errorf("kyok run %s: %w", runID, err)
	}
	k.Status = run.Status(status)
	k.ActorChain = chain
	return k, nil
}

// LLMOfferingServed reports whether the current leader's relay serves the
// offering (served_epoch is the leader's epoch).
func (s *Store) LLMOfferingServed(ctx context.Context, providerKey, name string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM llm_offerings o CROSS JOIN broker_leader l
		WHERE o.provider_key = $1 AND o.name = $2 AND o.served_epoch = l.epoch)`, providerKey, name).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("llm offering %s/%s served: %w", providerKey, name, err)
	}
	return ok, nil
}

// ServeLLMOfferings records a provider and the offerings one /ws/kyok link
// registered, marks them served by epoch, and marks dropped (names the
// link served before its new register) unserved.
func (s *Store) ServeLLMOfferings(ctx context.Context, epoch int64, p Provider, metadata json.RawMessage, names, dropped []string) error {
	return s.inTx(ctx, "serve llm offerings of "+p.PublicKey, func(tx pgx.Tx) error {
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
		for _, n := range names {
			if _, err := tx.Exec(ctx, `
				INSERT INTO llm_offerings (provider_key, name, metadata, served_epoch)
				VALUES ($1, $2, coalesce($3::jsonb, '{}'), $4)
				ON CONFLICT (provider_key, name) DO UPDATE SET
					metadata = excluded.metadata, served_epoch = excluded.served_epoch, last_seen_at = now()`,
				p.PublicKey, n, nullJSON(metadata), epoch); err != nil {
				return err
			}
		}
		if len(dropped) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE llm_offerings SET served_epoch = NULL
				WHERE provider_key = $1 AND name = ANY($2)`, p.PublicKey, dropped); err != nil {
				return err
			}
		}
		return nil
	})
}

// UnserveLLMOfferings records that nobody serves these offerings of key.
func (s *Store) UnserveLLMOfferings(ctx context.Context, epoch int64, key string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	return s.inTx(ctx, "mark llm offerings of "+key+" unserved", func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE llm_offerings SET served_epoch = NULL
			WHERE provider_key = $1 AND name = ANY($2) AND served_epoch IS NOT NULL`, key, names)
		return err
	})
}

// DeleteLLMOffering removes an offering record, refusing (ErrOfferingInUse)
// while a live run (not terminal) is bound to it. ErrNotFound when there is
// no such offering.
func (s *Store) DeleteLLMOffering(ctx context.Context, epoch int64, key, name string) error {
	return s.inTx(ctx, "delete llm offering "+name, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		var bound bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE kyok_llm_provider_key = $1
			AND kyok_llm_name = $2 AND kyok_binding IS NOT NULL AND status <> ALL($3))`,
			key, name, terminalStatuses()).Scan(&bound); err != nil {
			return err
		}
		if bound {
			return ErrOfferingInUse
		}
		tag, err := tx.Exec(ctx, `DELETE FROM llm_offerings WHERE provider_key = $1 AND name = $2`, key, name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return nil
	})
}
