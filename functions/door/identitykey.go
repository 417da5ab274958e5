package door

import (
	"fmt"
	"net/http"

	"github.com/funduq/funduq-go/core/apierr"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// CodeIdentityKeyMismatch is the refusal of a run with an actor chain by a
// door whose FUNDUQ_IDENTITY_KEY is not the leader's (CheckDispatchKey): the
// code a broker node on another key refuses tickets with.
const CodeIdentityKeyMismatch = apierr.CodeIdentityKeyMismatch

// CheckDispatchKey refuses to sign a bound run's dispatch hop with funduq
// when its key is not the one the leader of record published
// (agent.FunduqKey, read with the agent: no round trip of its own).
// FUNDUQ_IDENTITY_KEY must be the same on every node and door; a door
// holding another key would hand the provider a chain whose last hop no
// key it pinned signed (design.md §Deployment, "One identity key"). The
// refusal is 503 naming the misconfiguration and nothing else; both
// public keys go to the log only (its Err). Nothing is published yet (a
// leader of an older release, or none ever): nothing to compare, the run
// is admitted.
func CheckDispatchKey(agent store.Agent, funduq *identity.Signer) error {
	if funduq == nil || agent.FunduqKey == "" {
		return nil
	}
	mine := funduq.PublicKeyHex()
	if mine == agent.FunduqKey {
		return nil
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeIdentityKeyMismatch,
		Message: "funduq is misconfigured: this door's identity key is not the broker's, so it cannot sign " +
			"the dispatch of a run with an actor chain; an operator must set the same key everywhere",
		Err: fmt.Errorf("FUNDUQ_IDENTITY_KEY of this door is not the broker's: its public key %s, the leader published %s",
			mine, agent.FunduqKey)}
}
