package deploytest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTools writes `aws` and `sam` stand-ins into a folder: both log
// their arguments (one call per line) to calls.log; `aws cloudformation
// describe-stacks --stack-name <stack>` prints outputs (OutputKey TAB
// OutputValue lines), any other stack fails as a missing stack would.
func fakeTools(t *testing.T, stack string, outputs map[string]string) (bin, log string) {
	t.Helper()
	bin = t.TempDir()
	log = filepath.Join(bin, "calls.log")
	var table strings.Builder
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range outputs {
			if !yield(k) {
				return
			}
		}
	}) {
		table.WriteString(k + "\t" + outputs[k] + "\n")
	}
	if err := os.WriteFile(filepath.Join(bin, "outputs.txt"), []byte(table.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	aws := `#!/usr/bin/env bash
echo "aws $*" >> '` + log + `'
if [ "$1 $2" = "cloudformation describe-stacks" ]; then
	case " $* " in
	*" --stack-name ` + stack + ` "*) cat '` + filepath.Join(bin, "outputs.txt") + `'; exit 0 ;;
	esac
	echo "An error occurred (ValidationError): Stack does not exist" >&2
	exit 255
fi
exit 0
`
	sam := "#!/usr/bin/env bash\necho \"sam $*\" >> '" + log + "'\n"
	for name, body := range map[string]string{"aws": aws, "sam": sam} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin, log
}

// dryRunCall is one command `scripts/deploy --dry-run` printed.
type dryRunCall []string

// overrides parses the KEY=VALUE words after --parameter-overrides.
func (c dryRunCall) overrides() map[string]string {
	out := map[string]string{}
	i := slices.Index(c, "--parameter-overrides")
	if i < 0 {
		return out
	}
	for _, w := range c[i+1:] {
		if strings.HasPrefix(w, "--") {
			break
		}
		k, v, _ := strings.Cut(w, "=")
		out[k] = v
	}
	return out
}

func (c dryRunCall) flag(name string) string {
	if i := slices.Index(c, name); i >= 0 && i+1 < len(c) {
		return c[i+1]
	}
	return ""
}

// The whole deployment from one command: `scripts/deploy all` deploys the
// foundation, then the broker and the doors with the foundation's outputs
// as their parameters. Every parameter without a default is given, no
// parameter the template does not declare is, each one the foundation
// provides carries the right output's value, and the dry run changes
// nothing (the only AWS call reads the foundation's outputs).
func TestDeployAllWiring(t *testing.T) {
	foundation := loadTemplate(t, foundationPath)
	outputs := map[string]string{}
	for _, k := range keys(get(foundation.root, "Outputs")) {
		outputs[k] = "out-" + k
	}
	outputs["SecretArn"] = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:p-foundation/funduq-AbCdEf"
	bin, log := fakeTools(t, "p-foundation", outputs)

	code, stdout, stderr := runScript(t, "deploy", []string{"PATH=" + bin + ":" + os.Getenv("PATH")},
		"all", "--stack-prefix", "p", "--region", "eu-west-1", "--dry-run", "--anonymous", "deny", "--node-count", "3",
		"--jwks-url", "https://idp.example/.well-known/jwks.json", "--jwt-issuer", "https://idp.example", "--jwt-audience", "funduq")
	if code != 0 {
		t.Fatalf("deploy all --dry-run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var calls []dryRunCall
	for _, l := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(l, "dry-run: "); ok {
			calls = append(calls, strings.Fields(rest))
		}
	}
	find := func(prefix ...string) dryRunCall {
		t.Helper()
		for _, c := range calls {
			if len(c) >= len(prefix) && slices.Equal(c[:len(prefix)], prefix) {
				return c
			}
		}
		t.Fatalf("deploy all did not run %q; it ran %q", prefix, calls)
		return nil
	}
	cfnDeploy := func(template string) dryRunCall {
		t.Helper()
		for _, c := range calls {
			if len(c) > 2 && (c[0] == "aws" && c[1] == "cloudformation" && c[2] == "deploy" || c[0] == "sam" && c[1] == "deploy") &&
				c.flag("--template-file") == template {
				if c.flag("--region") != "eu-west-1" {
					t.Errorf("%s deployed without --region eu-west-1: %q", template, c)
				}
				return c
			}
		}
		t.Fatalf("deploy all did not deploy %s; it ran %q", template, calls)
		return nil
	}

	// The order: foundation, then broker, then doors.
	var order []string
	for _, c := range calls {
		if tf := c.flag("--template-file"); tf != "" {
			order = append(order, tf)
		}
	}
	if want := []string{foundationPath, "infra/broker.yaml", "template.yaml"}; !slices.Equal(order, want) {
		t.Errorf("deploy order %v, want %v", order, want)
	}
	if f := cfnDeploy(foundationPath); f.flag("--stack-name") != "p-foundation" {
		t.Errorf("foundation stack name %q, want p-foundation", f.flag("--stack-name"))
	}

	// checkParams: every parameter without a default is given, and only
	// declared parameters are.
	checkParams := func(rel string, got map[string]string) {
		t.Helper()
		c := loadTemplate(t, rel)
		params := get(c.root, "Parameters")
		for _, p := range keys(params) {
			if get(params, p, "Default") == nil && got[p] == "" {
				t.Errorf("%s: parameter %s (no default) is not given", rel, p)
			}
		}
		for p := range got {
			if get(params, p) == nil {
				t.Errorf("%s: deploy passes %s, which the template does not declare", rel, p)
			}
		}
	}
	// fromFoundation: the parameters a foundation output feeds.
	fromFoundation := func(rel string, got map[string]string, want map[string]string) {
		t.Helper()
		for param, output := range want {
			if get(foundation.root, "Outputs", output) == nil {
				t.Errorf("%s needs foundation output %s, which infra/foundation.yaml lacks", rel, output)
			}
			if got[param] != outputs[output] {
				t.Errorf("%s: %s=%q, want the foundation's %s (%q)", rel, param, got[param], output, outputs[output])
			}
		}
	}

	broker := cfnDeploy("infra/broker.yaml")
	bp := broker.overrides()
	checkParams("infra/broker.yaml", bp)
	fromFoundation("infra/broker.yaml", bp, map[string]string{"SecretArn": "SecretArn", "VpcId": "VpcId",
		"PublicSubnetIds": "PublicSubnetIds", "PrivateSubnetIds": "PrivateSubnetIds", "StoreClientSecurityGroupId": "BrokerStoreSecurityGroupId"})
	if broker.flag("--stack-name") != "p-broker" || bp["NodeCount"] != "3" {
		t.Errorf("broker: stack %q NodeCount %q, want p-broker and 3", broker.flag("--stack-name"), bp["NodeCount"])
	}
	// The binary goes to the foundation's bucket, where the hosts fetch it.
	upload := find("aws", "s3", "cp")
	if uri := bp["BinaryS3Uri"]; !strings.HasPrefix(uri, "s3://"+outputs["ArtifactBucket"]+"/") || upload[len(upload)-1] != uri ||
		!strings.HasSuffix(upload[len(upload)-2], "broker-node-linux-arm64") {
		t.Errorf("broker binary: uploaded %q, BinaryS3Uri %q, want the arm64 binary in the foundation's bucket", upload, uri)
	}
	find("scripts/build-broker", "--arch", "arm64")

	doors := cfnDeploy("template.yaml")
	dp := doors.overrides()
	checkParams("template.yaml", dp)
	fromFoundation("template.yaml", dp, map[string]string{"SecretArn": "SecretArn", "SubnetIds": "PrivateSubnetIds",
		"SecurityGroupId": "DoorSecurityGroupId"})
	if doors[0] != "sam" || doors.flag("--stack-name") != "p-doors" || dp["AnonymousCallers"] != "deny" ||
		dp["JwksUrl"] != "https://idp.example/.well-known/jwks.json" || dp["JwtIssuer"] != "https://idp.example" ||
		dp["JwtAudience"] != "funduq" || dp["StageName"] != "v1" || doors.flag("--s3-bucket") != outputs["ArtifactBucket"] {
		t.Errorf("doors: %q, want sam deploy of p-doors with the authorizer's settings into the foundation's bucket", doors)
	}
	// Callers go through API Gateway: the summary names the API's URL.
	if !strings.Contains(stdout, "callers  -> API Gateway REST API p-doors") {
		t.Errorf("deploy all --dry-run does not say callers go through API Gateway:\n%s", stdout)
	}
	find("scripts/build-lambdas")

	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(l, "aws cloudformation describe-stacks ") || !strings.Contains(l, "--stack-name p-foundation") {
			t.Errorf("the dry run called %q: want only reads of the foundation's outputs", l)
		}
	}
}

// A foundation stack without the outputs a stack needs is refused, naming
// the missing output, before anything is built or deployed.
func TestDeployRefusesForeignFoundation(t *testing.T) {
	bin, _ := fakeTools(t, "other", map[string]string{"VpcId": "vpc-1"})
	code, stdout, stderr := runScript(t, "deploy", []string{"PATH=" + bin + ":" + os.Getenv("PATH")},
		"broker", "--stack-name", "b", "--foundation-stack", "other", "--dry-run")
	if code != 2 || !strings.Contains(stderr, "no output SecretArn") || strings.Contains(stdout, "dry-run:") {
		t.Errorf("exit %d, stdout %q, stderr %q: want exit 2 naming output SecretArn, nothing run", code, stdout, stderr)
	}
	code, _, stderr = runScript(t, "deploy", []string{"PATH=" + bin + ":" + os.Getenv("PATH")},
		"doors", "--stack-name", "d", "--foundation-stack", "missing", "--dry-run")
	if code != 2 || !strings.Contains(stderr, "'missing'") {
		t.Errorf("missing foundation: exit %d, stderr %q", code, stderr)
	}
}

// `scripts/deploy all --dry-run` is what a newcomer runs before the first
// deployment, when the foundation stack does not exist yet (or no
// credentials are set): it still prints every command, with the
// foundation's outputs as placeholders, and the deployment, as the README
// says, instead of stopping at the missing foundation.
func TestDeployAllDryRunBeforeTheFoundationExists(t *testing.T) {
	bin, log := fakeTools(t, "other-foundation", nil)
	code, stdout, stderr := runScript(t, "deploy", []string{"PATH=" + bin + ":" + os.Getenv("PATH")},
		"all", "--stack-prefix", "p", "--region", "eu-west-1", "--dry-run", "--vpc-id", "vpc-mine")
	if code != 0 {
		t.Fatalf("deploy all --dry-run without a foundation: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "p-foundation") {
		t.Errorf("stderr does not say the foundation's outputs are placeholders:\n%s", stderr)
	}
	var broker, doors dryRunCall
	for _, l := range strings.Split(stdout, "\n") {
		rest, ok := strings.CutPrefix(l, "dry-run: ")
		if !ok {
			continue
		}
		c := dryRunCall(strings.Fields(rest))
		switch {
		case strings.Contains(rest, "infra/broker.yaml"):
			broker = c
		case strings.HasPrefix(rest, "sam deploy"):
			doors = c
		}
	}
	if broker == nil || doors == nil {
		t.Fatalf("want the broker and doors deploy commands:\n%s", stdout)
	}
	bo, do := broker.overrides(), doors.overrides()
	if got := bo["SecretArn"]; !strings.Contains(got, "p-foundation") || got != do["SecretArn"] {
		t.Errorf("SecretArn placeholders: broker %q, doors %q", got, do["SecretArn"])
	}
	if bo["VpcId"] != "vpc-mine" {
		t.Errorf("an option given explicitly must win over the placeholder: VpcId %q", bo["VpcId"])
	}
	if !strings.Contains(bo["StoreClientSecurityGroupId"], "BrokerStoreSecurityGroupId") ||
		!strings.Contains(do["SecurityGroupId"], "DoorSecurityGroupId") {
		t.Errorf("placeholders do not name the outputs: broker %v doors %v", bo, do)
	}
	if !strings.Contains(stdout, "The deployment:") {
		t.Errorf("the dry run does not print the deployment:\n%s", stdout)
	}
	b, _ := os.ReadFile(log)
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && !strings.HasPrefix(l, "aws cloudformation describe-stacks ") {
			t.Errorf("the dry run called %q", l)
		}
	}
}

// Retention is a deployment setting: `scripts/deploy broker --retention
// 720h` puts FUNDUQ_RETENTION into every host's environment. The README
// once said to add it to /etc/funduq/broker.env by hand, which the next
// deployment's new hosts do not have (they write that file at boot), so
// retention stopped without a word.
func TestDeployBrokerRetention(t *testing.T) {
	outputs := map[string]string{"SecretArn": "arn:aws:secretsmanager:eu-west-1:1:secret:f/funduq-x", "VpcId": "v",
		"PublicSubnetIds": "a,b", "PrivateSubnetIds": "c,d", "BrokerStoreSecurityGroupId": "sg", "ArtifactBucket": "bk"}
	bin, _ := fakeTools(t, "f", outputs)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "0"},
		{[]string{"--retention", "720h"}, "720h"},
	} {
		args := append([]string{"broker", "--stack-name", "b", "--foundation-stack", "f", "--dry-run"}, tc.args...)
		code, stdout, stderr := runScript(t, "deploy", []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, args...)
		if code != 0 {
			t.Fatalf("deploy %v: exit %d\nstderr %s", args, code, stderr)
		}
		var got string
		for _, l := range strings.Split(stdout, "\n") {
			if rest, ok := strings.CutPrefix(l, "dry-run: "); ok && strings.Contains(rest, "infra/broker.yaml") {
				got = dryRunCall(strings.Fields(rest)).overrides()["Retention"]
			}
		}
		if got != tc.want {
			t.Errorf("deploy %v: Retention=%q, want %q\n%s", args, got, tc.want, stdout)
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "infra", "broker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "FUNDUQ_RETENTION=${Retention}") {
		t.Error("infra/broker.yaml does not write FUNDUQ_RETENTION=${Retention} into the hosts' environment")
	}
}

// A newcomer reads the plan before installing the AWS tools: `scripts/deploy
// all --dry-run` on a machine without `aws` or `sam` printed the foundation
// and broker commands and then stopped, exit 2, at "'sam' not found on
// PATH", without the doors' command or the deployment. A dry run runs
// neither tool, so a missing one is said, not a stop.
func TestDeployAllDryRunWithoutTheTools(t *testing.T) {
	code, stdout, stderr := runScript(t, "deploy", []string{"PATH=" + pathWithout(t, "aws", "sam")},
		"all", "--stack-prefix", "p", "--region", "eu-west-1", "--dry-run")
	if code != 0 {
		t.Fatalf("deploy all --dry-run without aws and sam: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	for _, want := range []string{"infra/foundation.yaml", "infra/broker.yaml", "sam deploy", "The deployment:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the dry run does not print %q:\n%s", want, stdout)
		}
	}
	for _, tool := range []string{"'aws' not found", "'sam' not found"} {
		if !strings.Contains(stderr, tool) {
			t.Errorf("stderr does not say %s:\n%s", tool, stderr)
		}
	}
	// Without --dry-run a missing tool still stops the command before it
	// does anything.
	code, stdout, stderr = runScript(t, "deploy", []string{"PATH=" + pathWithout(t, "aws", "sam")},
		"foundation", "--stack-name", "f")
	if code != 2 || !strings.Contains(stderr, "'aws' not found") || stdout != "" {
		t.Errorf("deploy foundation without aws: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// pathWithout is this process's PATH with the named programs left out: a
// folder holding one is replaced by a folder of links to its other entries.
func pathWithout(t *testing.T, names ...string) string {
	t.Helper()
	var dirs []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		hides := false
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
				hides = true
			}
		}
		if !hides {
			dirs = append(dirs, dir)
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		copyDir := t.TempDir()
		for _, e := range entries {
			if slices.Contains(names, e.Name()) {
				continue
			}
			if err := os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(copyDir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, copyDir)
	}
	return strings.Join(dirs, string(filepath.ListSeparator))
}
