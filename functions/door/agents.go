package door

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// StorageTimeout bounds each storage call a door makes while answering, so
// an unreachable or hung database becomes a 503 within two seconds rather
// than a hang (D13). Every call has it to itself (Step).
const StorageTimeout = 1500 * time.Millisecond

// Step bounds one storage call (a step) of a request: StorageTimeout from
// now, or what is left of ctx — the request's budget, when it has one —
// if that is less. A request's steps run one after another, each under a
// Step of its own, so the step that meets a hung database costs the caller
// one bound, never the whole budget of the steps after it (design.md
// §Doors under storage faults); a budget only caps how long healthy but
// slow steps may take together.
func Step(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, StepBound(ctx))
}

// stepBoundKey carries a pinned step bound in a request's context
// (WithStepBound).
type stepBoundKey struct{}

// WithStepBound returns ctx with Step's bound, and the request budgets a
// door counts in it (StepBound), pinned at d instead of StorageTimeout.
// Only tests set it (a door's server context): a claim counted within the
// bound — a transaction's three attempts (D13), every caller queued behind
// one thread's row lock — then holds however slowly a starved machine
// runs the steps, as the developers' guide has it (no timed tests).
func WithStepBound(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, stepBoundKey{}, d)
}

// StepBound is the bound of one step of a request with context ctx:
// StorageTimeout, unless a test pinned another (WithStepBound).
func StepBound(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(stepBoundKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return StorageTimeout
}

// AgentJSON is one agent in GET /agents.
type AgentJSON struct {
	ProviderKey string          `json:"providerKey"`
	Fingerprint string          `json:"fingerprint"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Online      bool            `json:"online"`
}

// The bounds of one GET /agents page (design.md §The doors, "GET /agents
// is paged"), constants as the thread snapshot's are: ?limit= asks for up
// to MaxAgentsPage, DefaultAgentsPage without it.
const (
	DefaultAgentsPage = 100
	MaxAgentsPage     = 500
)

// MaxAgentsPageBytes bounds a page's agents as store.AgentsPage counts
// them (PostgreSQL's JSON of each, which Go's may at most double: it
// escapes U+2028 and U+2029), so a page stays under the 6 MB a Lambda
// function may answer. A page holds its first agent whatever its size.
const MaxAgentsPageBytes = 2 << 20

// AgentsList is the body of GET /agents. A list that fits one page is
// answered as it always was, agents alone; a longer one adds has_more and
// next_after, the ?after= of the next page.
type AgentsList struct {
	Agents    []AgentJSON `json:"agents"`
	HasMore   bool        `json:"has_more,omitempty"`
	NextAfter string      `json:"next_after,omitempty"`
}

// Agents serves GET /agents: one page of the registered agents that some
// roster serves or served within hideAfter (config
// DoorLimits.AgentsHiddenAfter; 0: every one), in (provider key, name)
// order, with online meaning the current leader's roster serves it.
func Agents(st *store.Store, log *slog.Logger, hideAfter time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := parseAgentsPage(r)
		if err != nil {
			WriteError(w, r, log, err)
			return
		}
		q.HiddenAfter = hideAfter
		ctx, cancel := Step(r.Context())
		defer cancel()
		page, err := st.AgentsPage(ctx, q)
		if err != nil {
			WriteError(w, r, log, err)
			return
		}
		out := AgentsList{Agents: make([]AgentJSON, 0, len(page.Agents)), HasMore: page.More}
		for _, a := range page.Agents {
			fp := ""
			if pub, err := identity.ParsePublicKey(a.ProviderKey); err == nil {
				fp = identity.Fingerprint(pub)
			}
			out.Agents = append(out.Agents, AgentJSON{ProviderKey: a.ProviderKey, Fingerprint: fp, Name: a.Name,
				Description: a.Description, Metadata: a.Metadata, Online: a.Online})
		}
		if page.More && len(page.Agents) > 0 {
			last := page.Agents[len(page.Agents)-1]
			out.NextAfter = agentsCursor(last.ProviderKey, last.Name)
		}
		writeJSONUnescaped(w, &out)
	})
}

// writeJSONUnescaped writes v as WriteJSON does but without HTML escaping,
// which would make a description of "<" six times the bytes its page
// counted.
func writeJSONUnescaped(w http.ResponseWriter, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		WriteJSON(w, http.StatusOK, v) // answers its own failure
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// PageLimit reads a page's ?limit=: def when absent, else one integer
// from 1 to most, refused 400 otherwise (GET /agents, a thread snapshot).
func PageLimit(q url.Values, def, most int) (int, error) {
	v, ok := q["limit"]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v[0])
	if len(v) > 1 || err != nil || n < 1 || n > most {
		return def, Refuse(http.StatusBadRequest, CodeBadRequest, "limit must be one integer from 1 to %d", most)
	}
	return n, nil
}

// parseAgentsPage reads ?limit= and ?after= of GET /agents, refusing as
// the thread snapshot's ?limit= and ?before= are refused.
func parseAgentsPage(r *http.Request) (store.AgentPageQuery, error) {
	p := store.AgentPageQuery{Limit: DefaultAgentsPage, MaxBytes: MaxAgentsPageBytes}
	q := r.URL.Query()
	n, err := PageLimit(q, DefaultAgentsPage, MaxAgentsPage)
	if err != nil {
		return p, err
	}
	p.Limit = n
	if v, ok := q["after"]; ok {
		key, name, ok := parseAgentsCursor(v[0])
		if len(v) > 1 || !ok {
			return p, Refuse(http.StatusBadRequest, CodeBadRequest, "after must be one next_after of an earlier GET /agents")
		}
		p.AfterKey, p.AfterName = key, name
	}
	return p, nil
}

// agentsCursorPrefix versions the cursor: it is opaque to callers, so what
// it encodes may change. It names the last agent listed (its key and name,
// which the caller has just read), so unlike a thread page's it tells
// nothing of anyone else's activity.
const agentsCursorPrefix = "a1."

var (
	cursorKey  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	cursorName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`) // the agents table's CHECK
)

func agentsCursor(key, name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(agentsCursorPrefix + key + "/" + name))
}

func parseAgentsCursor(s string) (key, name string, ok bool) {
	if len(s) > 300 {
		return "", "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(string(b), agentsCursorPrefix)
	if !ok {
		return "", "", false
	}
	key, name, ok = strings.Cut(rest, "/")
	if !ok || !cursorKey.MatchString(key) || !cursorName.MatchString(name) {
		return "", "", false
	}
	return key, name, true
}
