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

// redirectsToHTTPS says whether actions answer 301 to the same host, path
// and query over HTTPS on 443 (an ALB redirect's unset Host, Path and
// Query keep the request's: #{host}, /#{path}, #{query}).
func redirectsToHTTPS(actions *yaml.Node) bool {
	if actions == nil || len(actions.Content) != 1 || get(actions.Content[0], "Type").Value != "redirect" {
		return false
	}
	rc := get(actions.Content[0], "RedirectConfig")
	is := func(key, want string, unset bool) bool {
		v := get(rc, key)
		return v == nil && unset || v != nil && v.Value == want
	}
	return is("Protocol", "HTTPS", false) && is("Port", "443", false) && is("StatusCode", "HTTP_301", false) &&
		is("Host", "#{host}", true) && is("Path", "/#{path}", true) && is("Query", "#{query}", true)
}

// The listeners as CloudFormation creates them, without a certificate and
// with one. Each forwards only the public paths; and with a certificate
// the plain-HTTP listener forwards nothing — the console's token and
// session, and the provider paths, would cross the internet in clear —
// but answers every path 301 to HTTPS.
func TestBrokerListenersForwardOnlyPublicPaths(t *testing.T) {
	c := loadTemplate(t, "infra/broker.yaml")

	// The console's own patterns: a pattern ending in / is a subtree.
	public := slices.Clone(publicPaths)
	for _, p := range console.Patterns() {
		public = append(public, p)
		if strings.HasSuffix(p, "/") {
			public = append(public, p+"login", p+"api/state", p+"static/app.js")
		}
	}

	for _, tc := range []struct {
		name   string
		params map[string]string
		// listeners by Protocol; redirect: the HTTP listener redirects
		// every path to HTTPS.
		listeners []string
		redirect  bool
	}{
		{"without a certificate", map[string]string{"CertificateArn": ""}, []string{"HTTP"}, false},
		{"with a certificate", map[string]string{"CertificateArn": "arn:aws:acm:eu-west-1:123456789012:certificate/x",
			"PublicHostname": "broker.example.com"}, []string{"HTTP", "HTTPS"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkListeners(t, deployed(t, c, tc.params), public, tc.listeners, tc.redirect)
		})
	}
}

func checkListeners(t *testing.T, res *yaml.Node, public, wantListeners []string, redirect bool) {
	rules := map[string][]lbRule{}
	for _, name := range keys(res) {
		if get(res, name, "Type").Value != "AWS::ElasticLoadBalancingV2::ListenerRule" {
			continue
		}
		p := get(res, name, "Properties")
		l := refTarget(get(p, "ListenerArn"))
		// A rule exists exactly when its listener does.
		if get(res, l, "Type") == nil {
			t.Errorf("%s: ListenerArn names no listener this deployment has", name)
			continue
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

	var listeners []string
	for _, name := range keys(res) {
		if get(res, name, "Type").Value != "AWS::ElasticLoadBalancingV2::Listener" {
			continue
		}
		proto := get(res, name, "Properties", "Protocol").Value
		listeners = append(listeners, proto)
		def := get(res, name, "Properties", "DefaultActions")
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
		if proto == "HTTP" && redirect {
			for _, p := range slices.Concat(public, privatePaths) {
				if a := route(p); forwards(a) {
					t.Errorf("%s: %s is forwarded over plain HTTP although the load balancer has a certificate; "+
						"want a 301 to HTTPS", name, p)
				} else if !redirectsToHTTPS(a) {
					t.Errorf("%s: %s is not redirected 301 to HTTPS on 443", name, p)
				}
			}
			continue
		}
		if forwards(def) {
			t.Errorf("%s: the default action forwards every path to the nodes (e.g. /metrics)", name)
		} else if def == nil || len(def.Content) != 1 || get(def.Content[0], "Type").Value != "fixed-response" ||
			get(def.Content[0], "FixedResponseConfig", "StatusCode").Value != "404" {
			t.Errorf("%s: the default action must be a fixed-response 404", name)
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
	slices.Sort(listeners)
	if !slices.Equal(listeners, wantListeners) {
		t.Errorf("listeners %v, want %v", listeners, wantListeners)
	}
}
