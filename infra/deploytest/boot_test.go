package deploytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/funduq/funduq-go/core/config"
)

// bootRun is one run of the broker hosts' boot script under stand-ins.
type bootRun struct {
	code           int
	stderr         string
	env            map[string]string // /etc/funduq/broker.env, parsed; nil when not written
	envMode        os.FileMode
	migrateEnv     string // FUNDUQ_ lines the node binary saw under `funduq migrate`
	systemctlCalls string
	unit           string // /etc/systemd/system/funduq-broker.service as written, paths as on a host; "" when not written
}

// runBootScript runs infra/broker.yaml's user data as a host would at
// first boot, on this machine: the !Sub variables filled in the way
// CloudFormation does, every absolute path the script writes moved under a
// temporary root, and stand-ins on PATH for what a host has and this
// machine must not touch — `aws` (the binary download writes a stand-in
// node binary that records its environment; the secret read prints
// secretJSON), `systemctl`, and `sleep`. bash and python3 are this machine's own, as
// Amazon Linux 2023's are the host's.
func runBootScript(t *testing.T, secretJSON string) bootRun {
	t.Helper()
	for _, tool := range []string{"bash", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is needed to run the broker hosts' boot script: %v", tool, err)
			}
			t.Skipf("%s is needed to run the broker hosts' boot script: %v", tool, err)
		}
	}
	c := loadTemplate(t, "infra/broker.yaml")
	ud := get(c.root, "Resources", "LaunchTemplate", "Properties", "LaunchTemplateData", "UserData", "Fn::Base64")
	if ud == nil || ud.Tag != "!Sub" || ud.Kind != yaml.SequenceNode || len(ud.Content) != 2 {
		t.Fatal("LaunchTemplate user data: want Fn::Base64: !Sub [script, vars]")
	}
	vars := map[string]string{
		"BinaryS3Uri": "s3://artifacts/funduq/broker-node-test", "AWS::Region": "eu-west-1",
		"SecretArn":   "arn:aws:secretsmanager:eu-west-1:123456789012:secret:f/funduq-AbCdEf",
		"RedisPrefix": "funduq:", "LogLevel": "info", "Retention": "0", "AdvertiseUrl": "https://broker.example",
	}
	for _, k := range keys(ud.Content[1]) {
		if _, ok := vars[k]; !ok {
			t.Fatalf("the boot script's !Sub variable %s has no stand-in here", k)
		}
	}
	script := subVar.ReplaceAllStringFunc(ud.Content[0].Value, func(m string) string {
		v, ok := vars[m[2:len(m)-1]]
		if !ok {
			t.Fatalf("the boot script's %s has no stand-in here", m)
		}
		return v
	})
	script = strings.ReplaceAll(script, "${!", "${") // CloudFormation's escape for a literal ${

	root := t.TempDir()
	for _, p := range []string{"/etc/funduq", "/etc/systemd/system/", "/usr/local/bin/"} {
		script = strings.ReplaceAll(script, p, root+p)
	}
	// Nothing the script runs may reach the real system: every absolute
	// path left outside comments is one this rewrite missed.
	for i, line := range strings.Split(strings.ReplaceAll(script, root, "ROOT"), "\n") {
		if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") && regexp.MustCompile(`(^|[\s'"=>])/(etc|usr|var|opt|srv|root|home)/`).MatchString(l) {
			t.Fatalf("boot script line %d names a path this test does not move: %s", i+1, l)
		}
	}
	for _, d := range []string{"etc/systemd/system", "usr/local/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	bin, logs := t.TempDir(), t.TempDir()
	secret := filepath.Join(logs, "secret.json")
	if err := os.WriteFile(secret, []byte(secretJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	node := "#!/bin/sh\n{ echo \"broker-node $*\"; env | grep '^FUNDUQ_' | sort; } >> '" + filepath.Join(logs, "node.log") + "'\n"
	stand := map[string]string{
		"aws": `#!/bin/sh
case "$1 $2" in
"s3 cp") printf '%s' '` + strings.ReplaceAll(node, "'", `'\''`) + `' > "$4" ;;
"secretsmanager get-secret-value") cat '` + secret + `' ;;
*) echo "aws stand-in: unexpected $*" >&2; exit 1 ;;
esac
`,
		"systemctl": "#!/bin/sh\necho \"systemctl $*\" >> '" + filepath.Join(logs, "systemctl.log") + "'\n",
		// The migrate retries' pause: a boot whose `funduq migrate` fails
		// goes through its 30 attempts at once, not in five minutes.
		"sleep": "#!/bin/sh\nexit 0\n",
	}
	for name, body := range stand {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(logs, "user-data")
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path)
	cmd.Env = []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C.UTF-8"}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	var r bootRun
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		r.code = ee.ExitCode()
	}
	r.stderr = stderr.String()
	if b, err := os.ReadFile(filepath.Join(root, "etc/funduq/broker.env")); err == nil {
		fi, _ := os.Stat(filepath.Join(root, "etc/funduq/broker.env"))
		r.envMode = fi.Mode().Perm()
		r.env = map[string]string{}
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("broker.env: a line that is no KEY=value: %q (the boot exited %d)\n%s", line, r.code, r.stderr)
			}
			r.env[k] = v
		}
	}
	if b, err := os.ReadFile(filepath.Join(logs, "node.log")); err == nil {
		r.migrateEnv = string(b)
	}
	if b, err := os.ReadFile(filepath.Join(logs, "systemctl.log")); err == nil {
		r.systemctlCalls = string(b)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/funduq-broker.service")); err == nil {
		r.unit = strings.ReplaceAll(string(b), root, "")
	}
	return r
}

// bootSecret is the funduq secret's required keys, as the foundation
// composes them, with values of their shape.
var bootSecret = map[string]string{
	"database_url":      "postgres://funduq:pw0123456789@db.example.internal:5432/funduq?sslmode=require",
	"door_database_url": "postgres://funduq:pw0123456789@proxy.example.internal:5432/funduq?sslmode=require&default_query_exec_mode=exec",
	"redis_url":         "rediss://:auth0123456789abcdef@redis.example.internal:6379/0",
	"identity_key":      strings.Repeat("b6", 32),
	"token_secret":      strings.Repeat("T0k", 20),
}

// consoleTokenPlayed is a console_token as the foundation generates it:
// every character its generator may draw, at least its length.
func consoleTokenPlayed(t *testing.T) string {
	t.Helper()
	f := loadTemplate(t, foundationPath)
	for _, s := range resourcesOfType(f, "AWS::SecretsManager::Secret") {
		g := get(f.root, "Resources", s, "Properties", "GenerateSecretString")
		if k := get(g, "GenerateStringKey"); k == nil || k.Value != "console_token" {
			continue
		}
		set, n := generatorCharset(t, s, g)
		tok := set
		for len(tok) < n {
			tok += set
		}
		return tok
	}
	t.Fatalf("%s generates no console_token", foundationPath)
	return ""
}

// The broker hosts' boot, run: the funduq secret the foundation composes
// gives the node its console token, written so that both systemd and the
// `funduq` wrapper's shell read it whole; a secret of the older shape,
// without console_token, boots the same with the console off and says why;
// so does a console_token the environment file cannot carry as it is (no
// shell ever sees it). A missing required key still stops the boot before
// the node starts.
func TestBrokerBootScript(t *testing.T) {
	base := bootSecret
	secretWith := func(extra map[string]any, drop ...string) string {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	parse := func(t *testing.T, r bootRun) config.Broker {
		t.Helper()
		b, err := config.ParseBroker(r.env, config.Host{Hostname: "h", PID: 1})
		if err != nil {
			t.Fatalf("the node refuses the environment the boot wrote: %v", err)
		}
		return b
	}
	booted := func(t *testing.T, r bootRun) {
		t.Helper()
		if r.code != 0 || r.env == nil || r.envMode != 0o600 || !strings.Contains(r.systemctlCalls, "systemctl enable --now funduq-broker") ||
			!strings.Contains(r.migrateEnv, "broker-node migrate") {
			t.Fatalf("the boot: exit %d, broker.env %v (mode %v), systemctl %q, node %q\n%s",
				r.code, r.env != nil, r.envMode, r.systemctlCalls, r.migrateEnv, r.stderr)
		}
	}

	t.Run("the foundation's secret", func(t *testing.T) {
		tok := consoleTokenPlayed(t)
		r := runBootScript(t, secretWith(map[string]any{"console_token": tok}))
		booted(t, r)
		if b := parse(t, r); b.ConsoleToken != tok {
			t.Fatalf("FUNDUQ_CONSOLE_TOKEN %q, want the secret's console_token %q", b.ConsoleToken, tok)
		}
		// `funduq migrate` (and `funduq lease …`) source the file in a shell.
		if !strings.Contains(r.migrateEnv, "\nFUNDUQ_CONSOLE_TOKEN="+tok+"\n") {
			t.Fatalf("through the funduq wrapper the node saw:\n%s\nwant FUNDUQ_CONSOLE_TOKEN=%s", r.migrateEnv, tok)
		}
		if strings.Contains(r.stderr, "console") {
			t.Fatalf("the boot speaks of the console: %s", r.stderr)
		}
	})
	t.Run("a secret of the older shape", func(t *testing.T) {
		r := runBootScript(t, secretWith(nil))
		booted(t, r)
		if b := parse(t, r); b.ConsoleToken != "" {
			t.Fatalf("FUNDUQ_CONSOLE_TOKEN %q from a secret without console_token", b.ConsoleToken)
		}
		if _, ok := r.env["FUNDUQ_CONSOLE_TOKEN"]; ok || !strings.Contains(r.stderr, "no console_token key; the operator console stays off") {
			t.Fatalf("broker.env %v; the boot said %q", r.env, r.stderr)
		}
	})
	for name, bad := range map[string]any{
		"a console_token the file cannot carry": `shell'$(touch x)"quoted"; and \more`,
		"a console_token too short":             "short-token",
		"an empty console_token":                "",
		"a console_token not a string":          1234567890123456789,
	} {
		t.Run(name, func(t *testing.T) {
			r := runBootScript(t, secretWith(map[string]any{"console_token": bad}))
			booted(t, r)
			if _, ok := r.env["FUNDUQ_CONSOLE_TOKEN"]; ok || !strings.Contains(r.stderr, "console_token is not 16 or more of") ||
				strings.Contains(r.migrateEnv, "FUNDUQ_CONSOLE_TOKEN") {
				t.Fatalf("broker.env %v; node %q; the boot said %q", r.env, r.migrateEnv, r.stderr)
			}
			parse(t, r)
		})
	}
	t.Run("a required key missing", func(t *testing.T) {
		r := runBootScript(t, secretWith(map[string]any{"console_token": consoleTokenPlayed(t)}, "token_secret"))
		if r.code == 0 || r.systemctlCalls != "" || r.migrateEnv != "" || !strings.Contains(r.stderr, "token_secret") {
			t.Fatalf("the boot went on without token_secret: exit %d, systemctl %q, node %q\n%s", r.code, r.systemctlCalls, r.migrateEnv, r.stderr)
		}
	})
}
