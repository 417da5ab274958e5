package door

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// StorageTimeout bounds each storage call a door makes while answering, so
// an unreachable or hung database becomes a 503 within two seconds rather
// than a hang (D13). A request's first storage call is bounded by it alone,
// whatever budget the request has for its later steps.
const StorageTimeout = 1500 * time.Millisecond

// AgentJSON is one agent in GET /agents.
type AgentJSON struct {
	ProviderKey string          `json:"providerKey"`
	Fingerprint string          `json:"fingerprint"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Online      bool            `json:"online"`
}

// Agents serves GET /agents: every registered agent that some roster
// serves or served within hideAfter (config DoorLimits.AgentsHiddenAfter;
// 0: every one), with online meaning the current leader's roster serves it.
func Agents(st *store.Store, log *slog.Logger, hideAfter time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), StorageTimeout)
		defer cancel()
		list, err := st.ListAgentsServedWithin(ctx, hideAfter)
		if err != nil {
			WriteError(w, r, log, err)
			return
		}
		out := struct {
			Agents []AgentJSON `json:"agents"`
		}{Agents: make([]AgentJSON, 0, len(list))}
		for _, a := range list {
			fp := ""
			if pub, err := identity.ParsePublicKey(a.ProviderKey); err == nil {
				fp = identity.Fingerprint(pub)
			}
			out.Agents = append(out.Agents, AgentJSON{ProviderKey: a.ProviderKey, Fingerprint: fp, Name: a.Name,
				Description: a.Description, Metadata: a.Metadata, Online: a.Online})
		}
		WriteJSON(w, http.StatusOK, out)
	})
}
