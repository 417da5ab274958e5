package provider

import (
	"net/http"
	"time"

	"github.com/funduq/funduq-go/core/identity"
)

// ViewHeaderName is the header the caller doors read a view proof from.
const ViewHeaderName = "Funduq-View"

// ViewHeader signs a view proof with the provider's key for a read of id
// (a thread, run or task id; a context id for ListTasks) at the doors: the
// agent's provider is a party of every thread of its agents, bound or not
// (README "Security and limits"). The proof is good for 60 s.
func (c *Client) ViewHeader(id string) (name, value string) {
	return ViewHeaderName, identity.MakeViewHeader(c.cfg.Signer, id, time.Now().Unix())
}

// SignView sets a view proof for id on a request the agent makes to a
// door (GET /threads/{id}, GET /runs/{id}/events, A2A tasks/get …).
func (c *Client) SignView(r *http.Request, id string) {
	name, value := c.ViewHeader(id)
	r.Header.Set(name, value)
}
