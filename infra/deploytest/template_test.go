package deploytest

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/authorizer"
)

// secretVars must never come from a plain parameter: each is a Secrets
// Manager dynamic reference in template.yaml and read from the secret at
// boot on the broker hosts.
var secretVars = []string{"FUNDUQ_DATABASE_URL", "FUNDUQ_REDIS_URL", "FUNDUQ_IDENTITY_KEY", "FUNDUQ_TOKEN_SECRET"}

// brokerSecretVars are the broker hosts' alone, read from the funduq secret
// at boot like secretVars, never given to a door.
var brokerSecretVars = []string{"FUNDUQ_CONSOLE_TOKEN"}

// A parameter whose name says it carries a secret, or that is NoEcho, is a
// secret passed as a plain parameter.
var secretishParam = regexp.MustCompile(`(?i)(password|token|identity|key$|databaseurl|redisurl|dsn)`)

func checkNoSecretParameters(t *testing.T, c *cfn) {
	t.Helper()
	params := get(c.root, "Parameters")
	for _, p := range keys(params) {
		if get(params, p, "NoEcho") != nil {
			t.Errorf("%s: parameter %s is NoEcho: secrets come from Secrets Manager, not parameters", c.path, p)
		}
		if secretishParam.MatchString(p) {
			t.Errorf("%s: parameter %s looks like a secret passed as a parameter", c.path, p)
		}
	}
}

// function is a SAM function with Globals.Function applied.
type function struct {
	name  string
	props map[string]*yaml.Node
	env   map[string]*yaml.Node
}

func functions(t *testing.T, c *cfn) []function {
	t.Helper()
	globals := get(c.root, "Globals", "Function")
	res := get(c.root, "Resources")
	var out []function
	for _, name := range keys(res) {
		if get(res, name, "Type").Value != "AWS::Serverless::Function" {
			continue
		}
		f := function{name: name, props: map[string]*yaml.Node{}, env: map[string]*yaml.Node{}}
		for _, src := range []*yaml.Node{globals, get(res, name, "Properties")} {
			for _, k := range keys(src) {
				f.props[k] = get(src, k)
			}
			vars := get(src, "Environment", "Variables")
			for _, k := range keys(vars) {
				f.env[k] = get(vars, k)
			}
		}
		out = append(out, f)
	}
	return out
}

func TestTemplateFunctions(t *testing.T) {
	c := loadTemplate(t, "template.yaml")
	if n := c.checkReferences(t); n == 0 {
		t.Error("no intrinsic references found: are the short-form tags parsed?")
	}
	checkNoSecretParameters(t, c)
	if get(c.root, "Transform").Value != "AWS::Serverless-2016-10-31" {
		t.Error("template.yaml: not a SAM template")
	}

	doorVars, doorRequired := envTags(reflect.TypeFor[config.Door]())
	authVars, _ := envTags(reflect.TypeFor[authorizer.Config]())
	fns := functions(t, c)
	var doors []string
	routes := map[string]string{} // "METHOD path" -> door
	for _, f := range fns {
		scalar := func(k string) string {
			if n := f.props[k]; n != nil {
				return n.Value
			}
			return ""
		}
		if got := scalar("Runtime"); got != "provided.al2023" {
			t.Errorf("%s: Runtime %q, want provided.al2023", f.name, got)
		}
		if got := scalar("Handler"); got != "bootstrap" {
			t.Errorf("%s: Handler %q, want bootstrap", f.name, got)
		}
		if a := f.props["Architectures"]; a == nil || len(a.Content) != 1 || a.Content[0].Value != "arm64" {
			t.Errorf("%s: Architectures must be [arm64]", f.name)
		}
		if f.props["FunctionUrlConfig"] != nil {
			t.Errorf("%s: a Function URL: callers go through API Gateway only", f.name)
		}
		if got := get(f.props["LoggingConfig"], "LogFormat"); got == nil || got.Value != "JSON" {
			t.Errorf("%s: LoggingConfig.LogFormat must be JSON", f.name)
		}
		if to, err := strconv.Atoi(scalar("Timeout")); err != nil || to < 1 || to > 900 {
			t.Errorf("%s: Timeout %q, want 1 to 900 seconds", f.name, scalar("Timeout"))
		}
		// CodeUri is the prebuilt folder scripts/build-lambdas writes: .aws-build/<name>/.
		code := strings.TrimSuffix(scalar("CodeUri"), "/")
		name := path.Base(code)
		if path.Dir(code) != ".aws-build" {
			t.Errorf("%s: CodeUri %q, want .aws-build/<name>/", f.name, scalar("CodeUri"))
		} else if _, err := os.Stat(filepath.Join(repoRoot(t), "functions", name, "lambda", "main.go")); err != nil {
			t.Errorf("%s: CodeUri %q names no function with a Lambda entry: %v", f.name, code, err)
		}
		if name == "authorizer" {
			if f.props["VpcConfig"] != nil {
				t.Errorf("%s: the authorizer needs no VPC (it fetches the JWKS from the internet)", f.name)
			}
			for v := range f.env {
				if !slices.Contains(authVars, v) {
					t.Errorf("%s: variable %s is not read by authorizer.Config", f.name, v)
				}
				if slices.Contains(secretVars, v) || slices.Contains(brokerSecretVars, v) {
					t.Errorf("%s: the authorizer must not see %s", f.name, v)
				}
			}
			continue
		}
		doors = append(doors, name)
		if f.props["VpcConfig"] == nil {
			t.Errorf("%s: no VpcConfig: the doors reach PostgreSQL and Redis in the VPC", f.name)
		}
		for _, v := range doorRequired {
			if f.env[v] == nil {
				t.Errorf("%s: required variable %s is not provided", f.name, v)
			}
		}
		for v := range f.env {
			if !slices.Contains(doorVars, v) {
				t.Errorf("%s: variable %s is not read by config.Door", f.name, v)
			}
		}
		for _, v := range secretVars {
			n := f.env[v]
			if n == nil {
				continue
			}
			if n.Tag != "!Sub" || !strings.HasPrefix(n.Value, "{{resolve:secretsmanager:") {
				t.Errorf("%s: %s must be a Secrets Manager dynamic reference, got %s %q", f.name, v, n.Tag, n.Value)
			}
		}
		// The doors reach PostgreSQL through RDS Proxy: the secret's door_database_url.
		if n := f.env["FUNDUQ_DATABASE_URL"]; n == nil || !strings.HasSuffix(n.Value, ":SecretString:door_database_url}}") {
			t.Errorf("%s: FUNDUQ_DATABASE_URL must resolve the secret's door_database_url (RDS Proxy)", f.name)
		}
		// Every route is a streaming proxy integration of the one REST API;
		// only KYOK (its own token) skips the authorizer.
		ev := f.props["Events"]
		if len(keys(ev)) == 0 {
			t.Errorf("%s: no Api events: unreachable", f.name)
		}
		for _, e := range keys(ev) {
			p := get(ev, e, "Properties")
			if get(ev, e, "Type").Value != "Api" || get(p, "RestApiId") == nil || get(p, "RestApiId").Value != "DoorsApi" {
				t.Errorf("%s.%s: want an Api event on DoorsApi", f.name, e)
				continue
			}
			if m := get(p, "ResponseTransferMode"); m == nil || m.Value != "STREAM" {
				t.Errorf("%s.%s: ResponseTransferMode must be STREAM", f.name, e)
			}
			if ms, err := strconv.Atoi(get(p, "TimeoutInMillis").Value); err != nil || ms < 1000 || ms > 900000 {
				t.Errorf("%s.%s: TimeoutInMillis %q, want up to 900000 (the streaming maximum)", f.name, e, get(p, "TimeoutInMillis").Value)
			}
			auth := get(p, "Auth", "Authorizer")
			if (name == "kyok") != (auth != nil && auth.Value == "NONE") {
				t.Errorf("%s.%s: only the KYOK route skips the authorizer (Auth.Authorizer NONE)", f.name, e)
			}
			routes[get(p, "Method").Value+" "+get(p, "Path").Value] = name
		}
	}
	slices.Sort(doors)
	if want := []string{"a2a", "agui", "kyok"}; !slices.Equal(doors, want) {
		t.Errorf("doors in template.yaml: %v, want %v", doors, want)
	}
	// The routes are the doors' (the handlers' muxes).
	want := map[string]string{
		"POST /agui/{provider}/{name}": "agui", "GET /threads/{threadId}": "agui", "GET /runs/{runId}/events": "agui",
		"GET /agents": "agui", "POST /a2a/{provider}/{name}": "a2a", "POST /a2a/{provider}/{name}/rpc": "a2a",
		"GET /a2a/{provider}/{name}/.well-known/agent-card.json": "a2a", "POST /kyok/v1/chat/completions": "kyok",
	}
	if !reflect.DeepEqual(routes, want) {
		t.Errorf("routes %v\nwant %v", routes, want)
	}
	// The API: regional (the edge idle timeout is 30 s), throttled, with the
	// REQUEST authorizer as its default and no result caching.
	api := get(c.root, "Resources", "DoorsApi", "Properties")
	if get(api, "EndpointConfiguration", "Type").Value != "REGIONAL" {
		t.Error("DoorsApi: want a REGIONAL endpoint")
	}
	ms := get(api, "MethodSettings")
	if ms == nil || len(ms.Content) != 1 || get(ms.Content[0], "ThrottlingRateLimit").Value != "ThrottleRateLimit" ||
		get(ms.Content[0], "ThrottlingBurstLimit").Value != "ThrottleBurstLimit" {
		t.Error("DoorsApi: stage throttling must come from ThrottleRateLimit/ThrottleBurstLimit")
	}
	a := get(api, "Auth")
	if get(a, "DefaultAuthorizer").Value != "FunduqAuthorizer" ||
		get(a, "Authorizers", "FunduqAuthorizer", "FunctionPayloadType").Value != "REQUEST" ||
		get(a, "Authorizers", "FunduqAuthorizer", "FunctionArn").Value != "AuthorizerFunction.Arn" ||
		get(a, "Authorizers", "FunduqAuthorizer", "Identity", "ReauthorizeEvery").Value != "0" {
		t.Error("DoorsApi: want FunduqAuthorizer (REQUEST, AuthorizerFunction, not cached) as the default authorizer")
	}
}

func TestBrokerTemplate(t *testing.T) {
	c := loadTemplate(t, "infra/broker.yaml")
	if n := c.checkReferences(t); n == 0 {
		t.Error("no intrinsic references found: are the short-form tags parsed?")
	}
	checkNoSecretParameters(t, c)
	res := get(c.root, "Resources")

	var tgs, asgs int
	for _, name := range keys(res) {
		switch get(res, name, "Type").Value {
		case "AWS::ElasticLoadBalancingV2::TargetGroup":
			tgs++
			if p := get(res, name, "Properties", "HealthCheckPath"); p == nil || p.Value != "/readyz" {
				t.Errorf("%s: health check path must be /readyz (only the leader is ready)", name)
			}
			if p := get(res, name, "Properties", "Port"); p == nil || p.Value != "8700" {
				t.Errorf("%s: port must be 8700 (FUNDUQ_HTTP_ADDR)", name)
			}
		case "AWS::AutoScaling::AutoScalingGroup":
			asgs++
			if h := get(res, name, "Properties", "HealthCheckType"); h == nil || h.Value != "EC2" {
				t.Errorf("%s: HealthCheckType must be EC2: standbys fail /readyz by design", name)
			}
		}
	}
	if tgs != 1 || asgs != 1 {
		t.Errorf("want one target group and one Auto Scaling group, got %d and %d", tgs, asgs)
	}
	if min := get(c.root, "Parameters", "NodeCount", "MinValue"); min == nil || min.Value != "2" {
		t.Error("NodeCount must allow no fewer than 2 nodes")
	}

	// Providers are told (FUNDUQ_ADVERTISE_URL, e.g. in a standby's redirect) the URL the stack
	// gives them to connect to.
	adv := get(res, "LaunchTemplate", "Properties", "LaunchTemplateData", "UserData", "Fn::Base64")
	if adv == nil || adv.Kind != yaml.SequenceNode || len(adv.Content) != 2 || get(adv.Content[1], "AdvertiseUrl") == nil {
		t.Fatal("LaunchTemplate user data: want !Sub [script, {AdvertiseUrl: ...}]")
	}
	a, _ := yaml.Marshal(get(adv.Content[1], "AdvertiseUrl"))
	b, _ := yaml.Marshal(get(c.root, "Outputs", "BrokerUrl", "Value"))
	if string(a) != string(b) {
		t.Errorf("FUNDUQ_ADVERTISE_URL is\n%s\nbut the BrokerUrl output is\n%s", a, b)
	}
	if strings.Contains(string(a), "https://${LoadBalancer.DNSName}") {
		t.Error("HTTPS on the load balancer's own DNS name: no certificate can match it (use PublicHostname)")
	}

	// The environment file the user data writes provides what the broker requires.
	ud := get(res, "LaunchTemplate", "Properties", "LaunchTemplateData", "UserData", "Fn::Base64")
	if ud == nil || ud.Tag != "!Sub" || ud.Kind != yaml.SequenceNode {
		t.Fatal("LaunchTemplate user data: want Fn::Base64: !Sub [script, vars]")
	}
	script := ud.Content[0].Value
	all, required := envTags(reflect.TypeFor[config.Broker]())
	provided := map[string]bool{}
	for _, m := range regexp.MustCompile(`(FUNDUQ_[A-Z_]+)(=|")`).FindAllStringSubmatch(script, -1) {
		provided[m[1]] = true
	}
	for _, v := range required {
		if !provided[v] {
			t.Errorf("broker user data: required variable %s is not provided", v)
		}
	}
	for v := range provided {
		if !slices.Contains(all, v) {
			t.Errorf("broker user data: %s is not read by config.Broker", v)
		}
	}
	if !strings.Contains(script, "FUNDUQ_HTTP_ADDR=0.0.0.0:8700") {
		t.Error("broker user data: FUNDUQ_HTTP_ADDR must listen on 0.0.0.0:8700 (the target group's port)")
	}
	// The schema is applied before the node starts (migrate takes an advisory lock, so hosts
	// booting together take turns): a fresh deployment needs no separate migration step.
	mi, st := strings.Index(script, "/usr/local/bin/funduq migrate"), strings.Index(script, "systemctl enable --now funduq-broker")
	if mi < 0 || st < 0 || mi > st {
		t.Error("broker user data: `funduq migrate` must run before the service starts")
	}
	// Secrets come from the secret, in the same shape as the doors' keys.
	if !strings.Contains(script, "secretsmanager get-secret-value") || !strings.Contains(script, "${SecretArn}") {
		t.Error("broker user data: secrets must be read from Secrets Manager (SecretArn)")
	}
	for _, v := range append(slices.Clone(secretVars), brokerSecretVars...) {
		if regexp.MustCompile(regexp.QuoteMeta(v) + `=\$\{`).MatchString(script) {
			t.Errorf("broker user data: %s is substituted from a parameter", v)
		}
	}
}

// The unit restarts a node whose lease loop is stuck, not only one that
// exits: Type=notify with a watchdog the node pings while its lease loop
// makes progress (design.md §A stuck lease loop), the pings let through
// from the node's own process only.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "funduq-broker.service"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"[Unit]", "[Service]", "[Install]", "ExecStart=/usr/local/bin/broker-node\n",
		"EnvironmentFile=/etc/funduq/broker.env", "Restart=always", "WantedBy=multi-user.target"} {
		if !strings.Contains(s, want) {
			t.Errorf("funduq-broker.service: missing %q", want)
		}
	}
	checkWatchdogUnit(t, "funduq-broker.service", s)
}

// checkWatchdogUnit checks that the unit's [Service] is Type=notify with
// NotifyAccess=main and a WatchdogSec of at least a second and at most the
// default lease TTL (config.Broker's FUNDUQ_LEASE_TTL): the node pings at
// half of it, and a longer one only adds to how long a stuck node stays up.
func checkWatchdogUnit(t *testing.T, name, unit string) {
	t.Helper()
	svc := unitSection(unit, "Service")
	for k, want := range map[string]string{"Type": "notify", "NotifyAccess": "main", "Restart": "always"} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: [Service] %s=%v; want %s", name, k, got, want)
		}
	}
	f, _ := reflect.TypeFor[config.Waits]().FieldByName("LeaseTTL")
	ttl, err := time.ParseDuration(f.Tag.Get("envDefault"))
	if err != nil {
		t.Fatalf("config.Waits.LeaseTTL's default: %v", err)
	}
	ws := svc["WatchdogSec"]
	if len(ws) != 1 {
		t.Fatalf("%s: [Service] WatchdogSec=%v; want one, at most the lease TTL (%s)", name, ws, ttl)
	}
	d, err := time.ParseDuration(ws[0])
	if err != nil || d < time.Second || d > ttl {
		t.Errorf("%s: WatchdogSec=%s; want a duration from 1s to the lease TTL (%s)", name, ws[0], ttl)
	}
}

// unitSection is a systemd unit's section, each key's values in order;
// comments and blank lines are left out.
func unitSection(unit, section string) map[string][]string {
	out := map[string][]string{}
	in := false
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			in = line == "["+section+"]"
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && in {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// unitDirectives is a systemd unit's section headers and directives in
// order, without comments and blank lines.
func unitDirectives(unit string) []string {
	var out []string
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, ";") {
			out = append(out, line)
		}
	}
	return out
}

// The broker hosts' boot installs infra/funduq-broker.service itself,
// directive for directive: an EC2 host gets the watchdog the unit has. The
// Auto Scaling group cannot replace a stuck node (its HealthCheckType is
// EC2: standbys fail /readyz by design), so systemd is what restarts it.
func TestBrokerHostsInstallTheSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "funduq-broker.service"))
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := json.Marshal(bootSecret)
	r := runBootScript(t, string(secret))
	if r.code != 0 || r.unit == "" {
		t.Fatalf("the boot: exit %d, unit written %v\n%s", r.code, r.unit != "", r.stderr)
	}
	checkWatchdogUnit(t, "the unit the broker hosts' boot writes", r.unit)
	if got, want := unitDirectives(r.unit), unitDirectives(string(b)); !slices.Equal(got, want) {
		t.Errorf("the broker hosts' boot writes the unit\n%s\nnot infra/funduq-broker.service's\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The build: every door's bootstrap for linux/arm64 (through
// scripts/build-lambdas, into each function's CodeUri folder under a
// temporary root) and the broker node for linux/arm64, the architecture
// infra/broker.yaml runs (amd64 is the same code; not built here to keep
// the cross-compiles to four).
func TestBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles four binaries")
	}
	root := repoRoot(t)
	out := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "scripts", name), args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, b)
		}
	}
	run("build-lambdas", "--out", out)
	run("build-broker", "--out", filepath.Join(out, "broker"), "--arch", "arm64")

	check := func(p string, machine elf.Machine) {
		t.Helper()
		f, err := elf.Open(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return
		}
		defer f.Close()
		if f.Machine != machine {
			t.Errorf("%s: machine %v, want %v", p, f.Machine, machine)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: not executable", p)
		}
	}
	c := loadTemplate(t, "template.yaml")
	for _, f := range functions(t, c) {
		code := strings.TrimPrefix(strings.TrimSuffix(f.props["CodeUri"].Value, "/"), ".aws-build/")
		check(filepath.Join(out, code, f.props["Handler"].Value), elf.EM_AARCH64)
	}
	check(filepath.Join(out, "broker", "broker-node-linux-arm64"), elf.EM_AARCH64)
}

// The broker hosts set FUNDUQ_CONSOLE_TOKEN from the funduq secret, so the
// operator console is on in a deployment (docs/design.md §Deployment; what
// the boot does with and without the key: TestBrokerBootScript).
func TestBrokerHostsSetAConsoleToken(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "broker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `("FUNDUQ_CONSOLE_TOKEN", "console_token")`) {
		t.Error("infra/broker.yaml does not write FUNDUQ_CONSOLE_TOKEN from the secret's console_token")
	}
}
