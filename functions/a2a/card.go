package a2a

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// DefaultAgentVersion is a card's version when the registration names none.
const DefaultAgentVersion = "0.1.0"

// card serves the agent card built from the registration: the v1.0 shape
// for A2A-Version 1.x, the v0.3 shape otherwise (like the A2A servers).
func (h *Handler) card(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := door.Step(r.Context())
	agent, err := door.FindAgent(ctx, h.o.Store, r.PathValue("provider"), r.PathValue("name"))
	cancel()
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	// The version stated as a call states it (requestedVersion: the
	// header, else the query), so a client that cannot set headers reads
	// the card of the version its calls are served in.
	v, ok := ParseVersion(requestedVersion(r))
	if !ok {
		v = V10
	}
	w.Header().Add("Vary", VersionHeader)
	door.WriteJSON(w, http.StatusOK, BuildCard(agent, h.endpoint(r, agent), v, h.log))
}

// endpoint is the agent's JSON-RPC URL: the public base (Options.PublicURL
// or the request's forwarded or own host) + /a2a/{fingerprint}/{name}.
func (h *Handler) endpoint(r *http.Request, agent store.Agent) string {
	base := h.o.PublicURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if p := firstValue(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		host := r.Host
		if fh := firstValue(r.Header.Get("X-Forwarded-Host")); fh != "" {
			host = fh
		}
		base = scheme + "://" + host + strings.TrimRight(firstValue(r.Header.Get("X-Forwarded-Prefix")), "/")
	}
	prov := agent.ProviderKey
	if pub, err := identity.ParsePublicKey(agent.ProviderKey); err == nil {
		prov = identity.Fingerprint(pub)
	}
	return base + "/a2a/" + prov + "/" + url.PathEscape(agent.Name)
}

func firstValue(h string) string {
	v, _, _ := strings.Cut(h, ",")
	return strings.TrimSpace(v)
}

// BuildCard is the agent card of a registration at endpoint, in version v.
func BuildCard(agent store.Agent, endpoint string, v Version, log interface {
	Warn(string, ...any)
}) map[string]any {
	var extra map[string]json.RawMessage
	_ = json.Unmarshal(agent.AgentCardExtra, &extra)
	str := func(key, def string) string {
		var s string
		if raw, ok := extra[key]; ok && json.Unmarshal(raw, &s) == nil && s != "" {
			return s
		}
		return def
	}
	skills := []map[string]any{}
	var rawSkills []json.RawMessage
	if raw, ok := extra["skills"]; ok {
		_ = json.Unmarshal(raw, &rawSkills)
	}
	for i, raw := range rawSkills {
		var s map[string]any
		if json.Unmarshal(raw, &s) != nil {
			log.Warn("agent card: skill is not an object; skipped", "agent", agent.Name, "index", i)
			continue
		}
		id, _ := s["id"].(string)
		if id == "" {
			log.Warn("agent card: skill without an id; skipped", "agent", agent.Name, "index", i)
			continue
		}
		if n, _ := s["name"].(string); n == "" {
			s["name"] = id
		}
		if _, ok := s["description"].(string); !ok {
			s["description"] = ""
		}
		if _, ok := s["tags"].([]any); !ok {
			s["tags"] = []any{}
		}
		skillFor(v, s)
		for k := range s {
			if !slices.Contains(skillMembers[v], k) {
				log.Warn("agent card: skill member not in A2A "+v.String()+"'s AgentSkill; left out", "agent", agent.Name, "skill", id, "member", k)
				delete(s, k)
			}
		}
		skills = append(skills, s)
	}
	var exts []map[string]any
	if raw, ok := extra["extensions"]; ok {
		_ = json.Unmarshal(raw, &exts)
	}
	if agent.TakesInterjections {
		exts = append(exts, map[string]any{"uri": InterjectionExtension,
			"description": "a message may address the context's running task (metadata " + AddressedRunIDKey + ")"})
	}
	caps := map[string]any{"streaming": true, "pushNotifications": false}
	if len(exts) > 0 {
		caps["extensions"] = exts
	}
	card := map[string]any{
		"name":               str("name", agent.Name),
		"description":        str("description", agent.Description),
		"version":            str("version", DefaultAgentVersion),
		"capabilities":       caps,
		"defaultInputModes":  []string{"text/plain"},
		"defaultOutputModes": []string{"text/plain"},
		"skills":             skills,
	}
	if v == V10 {
		card["supportedInterfaces"] = []map[string]any{
			{"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
			{"url": endpoint, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
		}
	} else {
		card["url"] = endpoint
		card["preferredTransport"] = "JSONRPC"
		card["protocolVersion"] = "0.3.0"
	}
	return card
}

// skillMembers are the members each version's AgentSkill declares (the
// pinned @a2a-js/sdk's types): a strict ProtoJSON reader refuses a 1.0
// card with any other (design.md, §The doors: what an A2A caller receives).
var skillMembers = map[Version][]string{
	V03: {"id", "name", "description", "tags", "examples", "inputModes", "outputModes", "security"},
	V10: {"id", "name", "description", "tags", "examples", "inputModes", "outputModes", "securityRequirements"},
}

// skillFor writes a skill's security in v's shape, whichever the
// registration used: 0.3's "security" is [{scheme: [scope…]}], 1.0's
// "securityRequirements" is [{"schemes": {scheme: {"list": [scope…]}}}]
// (the SDK's own compat layer maps them so).
func skillFor(v Version, s map[string]any) {
	switch {
	case v == V10 && s["securityRequirements"] == nil && s["security"] != nil:
		reqs, ok := s["security"].([]any)
		if !ok {
			return
		}
		out := []any{}
		for _, r := range reqs {
			rm, ok := r.(map[string]any)
			if !ok {
				return
			}
			schemes := map[string]any{}
			for name, scopes := range rm {
				schemes[name] = map[string]any{"list": scopes}
			}
			out = append(out, map[string]any{"schemes": schemes})
		}
		s["securityRequirements"] = out
	case v == V03 && s["security"] == nil && s["securityRequirements"] != nil:
		reqs, ok := s["securityRequirements"].([]any)
		if !ok {
			return
		}
		out := []any{}
		for _, r := range reqs {
			rm, _ := r.(map[string]any)
			schemes, ok := rm["schemes"].(map[string]any)
			if !ok {
				return
			}
			req := map[string]any{}
			for name, sl := range schemes {
				slm, _ := sl.(map[string]any)
				list, ok := slm["list"].([]any)
				if !ok {
					list = []any{}
				}
				req[name] = list
			}
			out = append(out, req)
		}
		s["security"] = out
	}
}
