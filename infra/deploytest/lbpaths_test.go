package deploytest

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/funduq/funduq-go/broker-node/console"
)

// The broker load balancer faces ProviderCidr (anyone, by default), so its
// listeners forward only what a stranger there is meant to reach: tickets,
// the two link paths and the operator console (docs/design.md, "The broker
// on AWS"). /metrics, /livez and /readyz stay on the hosts' port, which
// only the load balancer's own health checks and the hosts themselves reach.

// publicPaths are paths a stranger at the load balancer must reach (the
// console's come from console.Patterns below).
var publicPaths = []string{"/tickets", "/ws/provider", "/ws/kyok"}

// privatePaths are paths it must not: the node's own and near misses.
var privatePaths = []string{"/metrics", "/livez", "/readyz", "/", "/debug/pprof/", "/Metrics",
	"/metrics/", "/tickets/x", "/ws/provider/x", "/ws/", "/consolex", "/console.js", "/favicon.ico"}

// albPattern is an ALB path-pattern value as a regexp: case-sensitive, over
// the whole path, * any run of characters, ? exactly one.
func albPattern(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range p {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

type lbRule struct {
	name     string
	priority int
	patterns []*regexp.Regexp
	actions  *yaml.Node
}

// forwards says whether actions send the request to the nodes.
func forwards(actions *yaml.Node) bool {
	if actions == nil {
		return false
	}
	for _, a := range actions.Content {
		if t := get(a, "Type"); t != nil && t.Value == "forward" {
			return true
		}
	}
	return false
}

func TestBrokerListenersForwardOnlyPublicPaths(t *testing.T) {
	c := loadTemplate(t, "infra/broker.yaml")
	res := get(c.root, "Resources")

	// The console's own patterns: a pattern ending in / is a subtree.
	public := slices.Clone(publicPaths)
	for _, p := range console.Patterns() {
		public = append(public, p)
		if strings.HasSuffix(p, "/") {
			public = append(public, p+"login", p+"api/state", p+"static/app.js")
		}
	}

	rules := map[string][]lbRule{}
	for _, name := range keys(res) {
		if get(res, name, "Type").Value != "AWS::ElasticLoadBalancingV2::ListenerRule" {
			continue
		}
		p := get(res, name, "Properties")
		l := refTarget(get(p, "ListenerArn"))
		if get(res, l, "Type") == nil {
			t.Errorf("%s: ListenerArn names no listener of this template", name)
			continue
		}
		// A rule exists exactly when its listener does.
		lc, rc := get(res, l, "Condition"), get(res, name, "Condition")
		if (lc == nil) != (rc == nil) || lc != nil && lc.Value != rc.Value {
			t.Errorf("%s: its Condition must be its listener %s's", name, l)
		}
		prio, err := strconv.Atoi(get(p, "Priority").Value)
		if err != nil || prio < 1 || prio > 50000 {
			t.Errorf("%s: Priority %q is not 1..50000", name, get(p, "Priority").Value)
		}
		r := lbRule{name: name, priority: prio, actions: get(p, "Actions")}
		for _, cond := range get(p, "Conditions").Content {
			// The model below knows path patterns only: another field would narrow
			// the rule in ways it does not check.
			if f := get(cond, "Field"); f == nil || f.Value != "path-pattern" {
				t.Fatalf("%s: a condition that is not a path-pattern", name)
			}
			vals := get(cond, "PathPatternConfig", "Values")
			if vals == nil || len(vals.Content) == 0 || len(vals.Content) > 5 {
				t.Errorf("%s: an ALB path-pattern condition takes 1 to 5 values", name)
				continue
			}
			for _, v := range vals.Content {
				r.patterns = append(r.patterns, albPattern(v.Value))
			}
		}
		for _, o := range rules[l] {
			if o.priority == prio {
				t.Errorf("%s and %s: the same Priority %d on listener %s", o.name, name, prio, l)
			}
		}
		rules[l] = append(rules[l], r)
	}

	var listeners int
	for _, name := range keys(res) {
		if get(res, name, "Type").Value != "AWS::ElasticLoadBalancingV2::Listener" {
			continue
		}
		listeners++
		def := get(res, name, "Properties", "DefaultActions")
		if forwards(def) {
			t.Errorf("%s: the default action forwards every path to the nodes (e.g. /metrics)", name)
		} else if def == nil || len(def.Content) != 1 || get(def.Content[0], "Type").Value != "fixed-response" ||
			get(def.Content[0], "FixedResponseConfig", "StatusCode").Value != "404" {
			t.Errorf("%s: the default action must be a fixed-response 404", name)
		}
		rs := rules[name]
		slices.SortFunc(rs, func(a, b lbRule) int { return a.priority - b.priority })
		// route is what the listener does with a path: the first matching rule
		// by priority, else the default action.
		route := func(path string) *yaml.Node {
			for _, r := range rs {
				for _, p := range r.patterns {
					if p.MatchString(path) {
						return r.actions
					}
				}
			}
			return def
		}
		for _, p := range public {
			if !forwards(route(p)) {
				t.Errorf("%s: %s is not forwarded to the nodes", name, p)
			}
		}
		for _, p := range privatePaths {
			if forwards(route(p)) {
				t.Errorf("%s: %s is forwarded to the nodes", name, p)
			}
		}
		for _, r := range rs {
			if forwards(r.actions) && refTarget(get(r.actions.Content[0], "TargetGroupArn")) != "TargetGroup" {
				t.Errorf("%s: forwards to something other than TargetGroup", r.name)
			}
		}
	}
	if listeners != 2 {
		t.Errorf("want the HTTP and HTTPS listeners, got %d", listeners)
	}
}
