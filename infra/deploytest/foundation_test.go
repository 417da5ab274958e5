package deploytest

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/funduq/funduq-go/core/config"
)

const foundationPath = "infra/foundation.yaml"

// resourcesOfType lists the template's resources of one type.
func resourcesOfType(c *cfn, typ string) []string {
	res := get(c.root, "Resources")
	var out []string
	for _, name := range keys(res) {
		if t := get(res, name, "Type"); t != nil && t.Value == typ {
			out = append(out, name)
		}
	}
	return out
}

// refTarget is the resource a node points at: !Ref X, !GetAtt X.Attr
// (or [X, Attr]), or "" when it is neither.
func refTarget(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	switch n.Tag {
	case "!Ref":
		return n.Value
	case "!GetAtt":
		if n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
			return n.Content[0].Value
		}
		name, _, _ := strings.Cut(n.Value, ".")
		return name
	}
	return ""
}

// refTargets lists the resources a node or a list of nodes points at,
// looking into !If branches.
func refTargets(n *yaml.Node) []string {
	if n == nil {
		return nil
	}
	if t := refTarget(n); t != "" {
		return []string{t}
	}
	var out []string
	switch {
	case n.Tag == "!If" && n.Kind == yaml.SequenceNode && len(n.Content) == 3:
		out = append(out, refTargets(n.Content[1])...)
		out = append(out, refTargets(n.Content[2])...)
	case n.Tag == "!Join" && n.Kind == yaml.SequenceNode && len(n.Content) == 2:
		out = append(out, refTargets(n.Content[1])...)
	case n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			out = append(out, refTargets(c)...)
		}
	}
	return out
}

func typeOf(c *cfn, resource string) string {
	if t := get(c.root, "Resources", resource, "Type"); t != nil {
		return t.Value
	}
	return ""
}

// subnetsByRoute sorts the template's subnets into public (their route
// table sends 0.0.0.0/0 to an internet gateway) and private (to a NAT
// gateway), and gives each subnet's AZ index (!Select [i, !GetAZs ""]).
func subnetsByRoute(t *testing.T, c *cfn) (public, private []string, az map[string]string) {
	t.Helper()
	res := get(c.root, "Resources")
	tableOf := map[string]string{}
	for _, a := range resourcesOfType(c, "AWS::EC2::SubnetRouteTableAssociation") {
		tableOf[refTarget(get(res, a, "Properties", "SubnetId"))] = refTarget(get(res, a, "Properties", "RouteTableId"))
	}
	kind := map[string]string{} // route table -> "public" / "private"
	for _, r := range resourcesOfType(c, "AWS::EC2::Route") {
		p := get(res, r, "Properties")
		if d := get(p, "DestinationCidrBlock"); d == nil || d.Value != "0.0.0.0/0" {
			continue
		}
		table := refTarget(get(p, "RouteTableId"))
		if gw := refTargets(get(p, "GatewayId")); len(gw) == 1 && typeOf(c, gw[0]) == "AWS::EC2::InternetGateway" {
			kind[table] = "public"
		}
		nats := refTargets(get(p, "NatGatewayId"))
		for _, n := range nats {
			if typeOf(c, n) != "AWS::EC2::NatGateway" {
				t.Errorf("route %s: NatGatewayId names %s, not a NAT gateway", r, n)
			}
		}
		if len(nats) > 0 {
			kind[table] = "private"
		}
	}
	az = map[string]string{}
	for _, s := range resourcesOfType(c, "AWS::EC2::Subnet") {
		a := get(res, s, "Properties", "AvailabilityZone")
		if a == nil || a.Tag != "!Select" || len(a.Content) != 2 || a.Content[1].Tag != "!GetAZs" {
			t.Errorf("subnet %s: AvailabilityZone must be !Select [i, !GetAZs \"\"]", s)
		} else {
			az[s] = a.Content[0].Value
		}
		switch kind[tableOf[s]] {
		case "public":
			public = append(public, s)
		case "private":
			private = append(private, s)
		default:
			t.Errorf("subnet %s: its route table sends 0.0.0.0/0 neither to an internet gateway nor to a NAT gateway", s)
		}
	}
	slices.Sort(public)
	slices.Sort(private)
	return public, private, az
}

// The network, the stores and the security groups are what the broker
// hosts and the doors need: public and private subnets in two AZs,
// PostgreSQL as a plain RDS instance (never behind RDS Proxy: the broker
// LISTENs), Redis with TLS and AUTH, each store admitting exactly the
// doors' and the broker hosts' groups on its port, and the outputs the
// other two stacks take as parameters.
func TestFoundationTemplate(t *testing.T) {
	c := loadTemplate(t, foundationPath)
	if n := c.checkReferences(t); n == 0 {
		t.Error("no intrinsic references found: are the short-form tags parsed?")
	}
	checkNoSecretParameters(t, c)
	res := get(c.root, "Resources")
	outputs := get(c.root, "Outputs")
	output := func(name string) *yaml.Node {
		v := get(outputs, name, "Value")
		if v == nil {
			t.Errorf("%s: no output %s", foundationPath, name)
		}
		return v
	}

	// Network: two public and two private subnets, each pair across two AZs.
	public, private, az := subnetsByRoute(t, c)
	for what, set := range map[string][]string{"public": public, "private": private} {
		azs := map[string]bool{}
		for _, s := range set {
			azs[az[s]] = true
		}
		if len(set) < 2 || len(azs) < 2 {
			t.Errorf("%s subnets %v span AZs %v: want two or more subnets in two or more AZs", what, set, slices.Collect(maps.Keys(azs)))
		}
	}
	outSubnets := func(name string) []string {
		s := refTargets(output(name))
		slices.Sort(s)
		return s
	}
	if got := outSubnets("PublicSubnetIds"); !slices.Equal(got, public) {
		t.Errorf("output PublicSubnetIds joins %v, want the public subnets %v", got, public)
	}
	if got := outSubnets("PrivateSubnetIds"); !slices.Equal(got, private) {
		t.Errorf("output PrivateSubnetIds joins %v, want the private subnets %v", got, private)
	}
	if v := output("PublicSubnetIds"); v != nil && v.Tag != "!Join" {
		t.Errorf("output PublicSubnetIds: want !Join [\",\", ...] (a List<Subnet::Id> parameter value), got %s", v.Tag)
	}

	// The client groups the outputs hand to the doors and the broker hosts.
	clients := map[string]string{}
	for _, o := range []string{"DoorSecurityGroupId", "BrokerStoreSecurityGroupId"} {
		g := refTarget(output(o))
		if typeOf(c, g) != "AWS::EC2::SecurityGroup" {
			t.Errorf("output %s: names %q, not a security group", o, g)
		}
		clients[g] = o
	}
	// admits checks that a store's security groups admit each client group
	// on port, and nothing else (no CIDR rules).
	admits := func(store string, groups *yaml.Node, port string, clients map[string]string) {
		t.Helper()
		admitted := map[string]bool{}
		for _, g := range refTargets(groups) {
			for _, rule := range get(res, g, "Properties", "SecurityGroupIngress").Content {
				from, to := get(rule, "FromPort"), get(rule, "ToPort")
				src := refTarget(get(rule, "SourceSecurityGroupId"))
				if get(rule, "CidrIp") != nil || get(rule, "CidrIpv6") != nil || src == "" {
					t.Errorf("%s: security group %s admits an address range; want only the client groups", store, g)
				}
				if from == nil || to == nil || from.Value != port || to.Value != port {
					t.Errorf("%s: security group %s rule for %s is not port %s", store, g, src, port)
				}
				admitted[src] = true
			}
		}
		for g, o := range clients {
			if !admitted[g] {
				t.Errorf("%s: does not admit %s (output %s): those clients could not connect", store, g, o)
			}
		}
	}

	// PostgreSQL: one RDS instance, reached directly by the broker hosts
	// (they LISTEN) and by the doors only through one RDS Proxy, which
	// admits the doors' group and authenticates to the instance with the
	// master secret over TLS.
	dbs := resourcesOfType(c, "AWS::RDS::DBInstance")
	proxies := resourcesOfType(c, "AWS::RDS::DBProxy")
	if len(proxies) != 1 {
		t.Fatalf("want one RDS Proxy (the doors' pooled way in), got %v", proxies)
	}
	px := get(res, proxies[0], "Properties")
	for k, want := range map[string]string{"EngineFamily": "POSTGRESQL", "RequireTLS": "true"} {
		if v := get(px, k); v == nil || v.Value != want {
			t.Errorf("%s: %s must be %s", proxies[0], k, want)
		}
	}
	if auth := get(px, "Auth"); auth == nil || len(auth.Content) != 1 || get(auth.Content[0], "AuthScheme").Value != "SECRETS" ||
		typeOf(c, refTarget(get(auth.Content[0], "SecretArn"))) != "AWS::SecretsManager::Secret" {
		t.Errorf("%s: Auth must be one SECRETS entry naming the database master secret", proxies[0])
	}
	if got := slices.Sorted(slices.Values(refTargets(get(px, "VpcSubnetIds")))); !slices.Equal(got, private) {
		t.Errorf("%s: subnets %v, want the private subnets %v", proxies[0], got, private)
	}
	tgs := resourcesOfType(c, "AWS::RDS::DBProxyTargetGroup")
	if len(tgs) != 1 || refTarget(get(res, tgs[0], "Properties", "DBProxyName")) != proxies[0] ||
		len(dbs) != 1 || !slices.Contains(refTargets(get(res, tgs[0], "Properties", "DBInstanceIdentifiers")), dbs[0]) {
		t.Errorf("target groups %v: want one, joining %v to the RDS instance %v", tgs, proxies, dbs)
	}
	proxyGroups := refTargets(get(px, "VpcSecurityGroupIds"))
	if len(proxyGroups) != 1 {
		t.Fatalf("%s: want one security group, got %v", proxies[0], proxyGroups)
	}
	var doorGroup, brokerGroup string
	for g, o := range clients {
		if o == "DoorSecurityGroupId" {
			doorGroup = g
		} else {
			brokerGroup = g
		}
	}
	admits(proxies[0], get(px, "VpcSecurityGroupIds"), "5432", map[string]string{doorGroup: "DoorSecurityGroupId"})
	if len(dbs) != 1 {
		t.Fatalf("want one RDS instance, got %v", dbs)
	}
	db := get(res, dbs[0], "Properties")
	for k, want := range map[string]string{"Engine": "postgres", "PubliclyAccessible": "false", "StorageEncrypted": "true", "DBName": "funduq"} {
		if v := get(db, k); v == nil || v.Value != want {
			t.Errorf("%s: %s must be %s", dbs[0], k, want)
		}
	}
	if get(db, "ManageMasterUserPassword") != nil {
		t.Errorf("%s: ManageMasterUserPassword rotates the password under the composed database_url", dbs[0])
	}
	admits(dbs[0], get(db, "VPCSecurityGroups"), "5432", map[string]string{proxyGroups[0]: "(RDS Proxy)", brokerGroup: "BrokerStoreSecurityGroupId"})
	for _, g := range refTargets(get(db, "VPCSecurityGroups")) {
		for _, rule := range get(res, g, "Properties", "SecurityGroupIngress").Content {
			if refTarget(get(rule, "SourceSecurityGroupId")) == doorGroup {
				t.Errorf("%s: admits the doors directly: they go through RDS Proxy", dbs[0])
			}
		}
	}
	checkPrivateSubnetGroup(t, c, dbs[0], get(db, "DBSubnetGroupName"), "SubnetIds", private)

	// Redis: TLS in transit and an AUTH token, on one shard's primary endpoint.
	rgs := resourcesOfType(c, "AWS::ElastiCache::ReplicationGroup")
	if len(rgs) != 1 {
		t.Fatalf("want one ElastiCache replication group, got %v", rgs)
	}
	rg := get(res, rgs[0], "Properties")
	if v := get(rg, "TransitEncryptionEnabled"); v == nil || v.Value != "true" {
		t.Errorf("%s: TransitEncryptionEnabled must be true (the AUTH token crosses the network)", rgs[0])
	}
	if v := get(rg, "AuthToken"); v == nil {
		t.Errorf("%s: no AuthToken: Redis would take any client in the VPC", rgs[0])
	}
	if v := get(rg, "TransitEncryptionMode"); v != nil && v.Value != "required" {
		t.Errorf("%s: TransitEncryptionMode %s lets clients skip TLS", rgs[0], v.Value)
	}
	if get(rg, "NumNodeGroups") != nil {
		t.Errorf("%s: cluster mode: redis_url names one primary endpoint", rgs[0])
	}
	admits(rgs[0], get(rg, "SecurityGroupIds"), "6379", clients)
	checkPrivateSubnetGroup(t, c, rgs[0], get(rg, "CacheSubnetGroupName"), "SubnetIds", private)

	// Outputs the other stacks take, pointing at the right kind of resource.
	for name, typ := range map[string]string{"VpcId": "AWS::EC2::VPC", "SecretArn": "AWS::SecretsManager::Secret", "ArtifactBucket": "AWS::S3::Bucket"} {
		if v := output(name); v != nil && (v.Tag != "!Ref" || typeOf(c, v.Value) != typ) {
			t.Errorf("output %s: want !Ref of a %s, got %s %s", name, typ, v.Tag, v.Value)
		}
	}
	// No output carries a secret's value.
	walk(outputs, func(n *yaml.Node) {
		if strings.Contains(n.Value, "{{resolve:") {
			t.Errorf("%s:%d: an output resolves a secret", foundationPath, n.Line)
		}
	})
}

// checkPrivateSubnetGroup: a store's subnet group holds the private subnets.
func checkPrivateSubnetGroup(t *testing.T, c *cfn, store string, groupRef *yaml.Node, key string, private []string) {
	t.Helper()
	g := refTarget(groupRef)
	got := refTargets(get(c.root, "Resources", g, "Properties", key))
	slices.Sort(got)
	if g == "" || !slices.Equal(got, private) {
		t.Errorf("%s: subnet group %q holds %v, want the private subnets %v", store, g, got, private)
	}
}

// smPunctuation is the punctuation Secrets Manager's password generator
// draws from.
const smPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// generatorCharset is the set of characters a GenerateSecretString may
// produce, and the length it produces.
func generatorCharset(t *testing.T, name string, g *yaml.Node) (string, int) {
	t.Helper()
	flag := func(k string) bool { v := get(g, k); return v != nil && v.Value == "true" }
	var set string
	if !flag("ExcludeLowercase") {
		set += "abcdefghijklmnopqrstuvwxyz"
	}
	if !flag("ExcludeUppercase") {
		set += "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	}
	if !flag("ExcludeNumbers") {
		set += "0123456789"
	}
	if !flag("ExcludePunctuation") {
		set += smPunctuation
	}
	if flag("IncludeSpace") {
		set += " "
	}
	if ex := get(g, "ExcludeCharacters"); ex != nil {
		set = strings.Map(func(r rune) rune {
			if strings.ContainsRune(ex.Value, r) {
				return -1
			}
			return r
		}, set)
	}
	n := 32 // Secrets Manager's default length
	if l := get(g, "PasswordLength"); l != nil {
		var err error
		if n, err = strconv.Atoi(l.Value); err != nil {
			t.Fatalf("%s: PasswordLength %q", name, l.Value)
		}
	}
	if set == "" {
		t.Fatalf("%s: the generator excludes every character", name)
	}
	return set, n
}

// generated plays Secrets Manager for one generated secret: its JSON
// object with the generated key filled by a string of the allowed
// characters (every one of them, as far as the length allows, worst
// first: punctuation leads).
func generated(t *testing.T, name string, g *yaml.Node) (map[string]string, string) {
	t.Helper()
	set, n := generatorCharset(t, name, g)
	order := []rune(set)
	slices.SortStableFunc(order, func(a, b rune) int {
		pa, pb := strings.ContainsRune(smPunctuation, a), strings.ContainsRune(smPunctuation, b)
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return 0
	})
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteRune(order[i%len(order)])
	}
	obj := map[string]string{}
	if tmpl := get(g, "SecretStringTemplate"); tmpl != nil {
		if err := json.Unmarshal([]byte(tmpl.Value), &obj); err != nil {
			t.Fatalf("%s: SecretStringTemplate: %v", name, err)
		}
	}
	key := get(g, "GenerateStringKey")
	if key == nil {
		t.Fatalf("%s: no GenerateStringKey: the composed secret reads keys of JSON objects", name)
	}
	obj[key.Value] = b.String()
	return obj, set
}

var resolveRef = regexp.MustCompile(`\{\{resolve:secretsmanager:([^}]+?):SecretString:([^:}]+)\}\}`)

// The funduq secret the stack composes is one the binaries accept: with
// every generated secret played out (worst-case characters), the composed
// JSON parses, carries exactly its six keys, passes config.ParseDoor and
// config.ParseBroker (the console on), its database_url names the RDS instance endpoint over
// TLS with the master user's credentials, and its redis_url the ElastiCache
// primary endpoint over TLS with the AUTH token the replication group was
// created with.
func TestFoundationSecret(t *testing.T) {
	c := loadTemplate(t, foundationPath)
	res := get(c.root, "Resources")
	params := get(c.root, "Parameters")

	// Play out every generated secret; arn is what !Ref gives.
	values := map[string]map[string]string{}
	charset := map[string]string{}
	arn := func(r string) string { return "arn:aws:secretsmanager:eu-west-1:123456789012:secret:" + r + "-AbCdEf" }
	var composed []string
	for _, s := range resourcesOfType(c, "AWS::SecretsManager::Secret") {
		p := get(res, s, "Properties")
		if g := get(p, "GenerateSecretString"); g != nil {
			values[arn(s)], charset[s] = generated(t, s, g)
			continue
		}
		composed = append(composed, s)
	}
	if len(composed) != 1 {
		t.Fatalf("want one composed secret (the funduq secret), got %v", composed)
	}
	if out := refTarget(get(c.root, "Outputs", "SecretArn", "Value")); out != composed[0] {
		t.Fatalf("output SecretArn names %q, want the composed secret %s", out, composed[0])
	}

	// resolve plays CloudFormation on a !Sub string: ${Resource} is its
	// !Ref, ${Resource.Attr} a stand-in, then the dynamic references.
	attrs := map[string]string{}
	resolve := func(n *yaml.Node) string {
		t.Helper()
		if n == nil || n.Tag != "!Sub" || n.Kind != yaml.ScalarNode {
			t.Fatalf("line %d: want a !Sub string of dynamic references", n.Line)
		}
		s := subVar.ReplaceAllStringFunc(n.Value, func(m string) string {
			v := m[2 : len(m)-1]
			if get(params, v) != nil {
				t.Errorf("line %d: ${%s}: a parameter inside a secret value", n.Line, v)
				return "PARAM"
			}
			if r, attr, ok := strings.Cut(v, "."); ok {
				val := strings.ToLower(r+"-"+strings.ReplaceAll(attr, ".", "-")) + ".example.internal"
				if strings.HasSuffix(attr, "Port") {
					val = map[string]string{"Database": "5432", "Redis": "6379"}[r]
					if val == "" {
						val = "1"
					}
				}
				attrs[v] = val
				return val
			}
			if typeOf(c, v) == "AWS::SecretsManager::Secret" {
				return arn(v)
			}
			return "ref-" + v
		})
		return resolveRef.ReplaceAllStringFunc(s, func(m string) string {
			sm := resolveRef.FindStringSubmatch(m)
			obj, ok := values[sm[1]]
			if !ok {
				t.Errorf("line %d: %s resolves a secret that is not generated here", n.Line, m)
				return ""
			}
			v, ok := obj[sm[2]]
			if !ok {
				t.Errorf("line %d: %s: the secret has no key %s", n.Line, m, sm[2])
			}
			return v
		})
	}

	raw := resolve(get(res, composed[0], "Properties", "SecretString"))
	var secret map[string]string
	if err := json.Unmarshal([]byte(raw), &secret); err != nil {
		t.Fatalf("the composed funduq secret is not a JSON object of strings: %v\n%s", err, raw)
	}
	if got := slices.Sorted(maps.Keys(secret)); !slices.Equal(got, []string{"console_token", "database_url", "door_database_url", "identity_key", "redis_url", "token_secret"}) {
		t.Errorf("funduq secret keys %v, want console_token database_url door_database_url identity_key redis_url token_secret", got)
	}
	environ := map[string]string{
		"FUNDUQ_DATABASE_URL": secret["door_database_url"], "FUNDUQ_REDIS_URL": secret["redis_url"],
		"FUNDUQ_IDENTITY_KEY": secret["identity_key"], "FUNDUQ_TOKEN_SECRET": secret["token_secret"],
	}
	if _, err := config.ParseDoor(environ); err != nil {
		t.Errorf("a door would refuse the composed secret: %v", err)
	}
	// door_database_url: RDS Proxy, TLS, the master credentials, and pgx
	// sending unnamed statements (a named PREPARE pins a proxied session).
	pxc, err := pgxpool.ParseConfig(secret["door_database_url"])
	if err != nil {
		t.Fatalf("door_database_url does not parse: %v", err)
	}
	proxy := resourcesOfType(c, "AWS::RDS::DBProxy")[0]
	if want := attrs[proxy+".Endpoint"]; want == "" || pxc.ConnConfig.Host != want || pxc.ConnConfig.TLSConfig == nil ||
		pxc.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeExec {
		t.Errorf("door_database_url: host %q TLS %v exec mode %v; want RDS Proxy %s.Endpoint over TLS in exec mode",
			pxc.ConnConfig.Host, pxc.ConnConfig.TLSConfig != nil, pxc.ConnConfig.DefaultQueryExecMode, proxy)
	}
	environ["FUNDUQ_DATABASE_URL"] = secret["database_url"]
	environ["FUNDUQ_HTTP_ADDR"], environ["FUNDUQ_ADVERTISE_URL"] = "0.0.0.0:8700", "https://broker.example"
	environ["FUNDUQ_CONSOLE_TOKEN"] = secret["console_token"]
	if b, err := config.ParseBroker(environ, config.Host{Hostname: "h", PID: 1}); err != nil {
		t.Errorf("a broker node would refuse the composed secret: %v", err)
	} else if b.ConsoleToken == "" {
		t.Error("a broker node of the composed secret has its console off")
	}

	// database_url: the instance endpoint, TLS, the master credentials.
	db := resourcesOfType(c, "AWS::RDS::DBInstance")[0]
	pg, err := pgconn.ParseConfig(secret["database_url"])
	if err != nil {
		t.Fatalf("database_url does not parse: %v", err)
	}
	if want := attrs[db+".Endpoint.Address"]; want == "" || pg.Host != want {
		t.Errorf("database_url host %q, want the RDS instance endpoint %s.Endpoint.Address", pg.Host, db)
	}
	if pg.TLSConfig == nil {
		t.Error("database_url does not require TLS (RDS refuses plain connections)")
	}
	dbp := get(res, db, "Properties")
	if user := resolve(get(dbp, "MasterUsername")); pg.User != user {
		t.Errorf("database_url user %q, RDS master user %q", pg.User, user)
	}
	if pw := resolve(get(dbp, "MasterUserPassword")); pg.Password != pw || pw == "" {
		t.Error("database_url's password is not the RDS master password")
	}
	if len(pg.Password) < 8 || len(pg.Password) > 128 || strings.ContainsAny(pg.Password, "/@\" ") {
		t.Errorf("RDS master password: want 8-128 characters without / @ \" or space, the generator allows %q (length %d)", charsetOf(t, c, dbp, "MasterUserPassword"), len(pg.Password))
	}

	// redis_url: the primary endpoint, TLS, the AUTH token.
	rg := resourcesOfType(c, "AWS::ElastiCache::ReplicationGroup")[0]
	ro, err := redis.ParseURL(secret["redis_url"])
	if err != nil {
		t.Fatalf("redis_url does not parse: %v", err)
	}
	if want := attrs[rg+".PrimaryEndPoint.Address"] + ":" + attrs[rg+".PrimaryEndPoint.Port"]; ro.Addr != want {
		t.Errorf("redis_url address %q, want the primary endpoint %s", ro.Addr, want)
	}
	if ro.TLSConfig == nil {
		t.Error("redis_url is not rediss:// (transit encryption is required)")
	}
	token := resolve(get(res, rg, "Properties", "AuthToken"))
	if ro.Password != token || ro.Username != "" {
		t.Error("redis_url does not authenticate with the replication group's AUTH token (and no user name)")
	}
	if len(token) < 16 || len(token) > 128 || strings.ContainsAny(token, "@\"/ ") {
		t.Errorf("ElastiCache AUTH token: want 16-128 printable characters without @ \" / or space, the generator allows %q (length %d)", charsetOf(t, c, get(res, rg, "Properties"), "AuthToken"), len(token))
	}
}

// charsetOf names the generator behind a property's dynamic reference.
func charsetOf(t *testing.T, c *cfn, props *yaml.Node, key string) string {
	t.Helper()
	n := get(props, key)
	if n == nil {
		return ""
	}
	for _, m := range subVar.FindAllStringSubmatch(n.Value, -1) {
		if g := get(c.root, "Resources", m[1], "Properties", "GenerateSecretString"); g != nil {
			set, _ := generatorCharset(t, m[1], g)
			return set
		}
	}
	return ""
}

// The doors (dynamic references in template.yaml) and the broker hosts
// (their user data) read each variable from the same key of the funduq
// secret, and those are the keys the foundation composes: a key spelt
// differently in one place would leave a binary without its setting.
func TestSecretKeysAgree(t *testing.T) {
	composed := map[string]bool{}
	f := loadTemplate(t, foundationPath)
	for _, s := range resourcesOfType(f, "AWS::SecretsManager::Secret") {
		if ss := get(f.root, "Resources", s, "Properties", "SecretString"); ss != nil {
			for _, m := range regexp.MustCompile(`"([a-z_]+)":`).FindAllStringSubmatch(ss.Value, -1) {
				composed[m[1]] = true
			}
		}
	}

	doors := map[string]string{} // variable -> key
	tmpl := loadTemplate(t, "template.yaml")
	for _, fn := range functions(t, tmpl) {
		for v, n := range fn.env {
			if m := regexp.MustCompile(`^\{\{resolve:secretsmanager:\$\{SecretArn\}:SecretString:([a-z_]+)\}\}$`).FindStringSubmatch(n.Value); m != nil {
				doors[v] = m[1]
			}
		}
	}
	broker := map[string]string{}
	ud := get(loadTemplate(t, "infra/broker.yaml").root, "Resources", "LaunchTemplate", "Properties", "LaunchTemplateData", "UserData", "Fn::Base64")
	if ud == nil || ud.Kind != yaml.SequenceNode {
		t.Fatal("infra/broker.yaml: no user data script")
	}
	for _, m := range regexp.MustCompile(`\("(FUNDUQ_[A-Z_]+)", "([a-z_]+)"\)`).FindAllStringSubmatch(ud.Content[0].Value, -1) {
		broker[m[1]] = m[2]
	}
	// The console's token is the broker hosts' alone.
	for _, v := range brokerSecretVars {
		if doors[v] != "" || broker[v] == "" || !composed[broker[v]] {
			t.Errorf("%s: doors read key %q (want none), broker hosts %q; the foundation composes %v", v, doors[v], broker[v], slices.Sorted(maps.Keys(composed)))
		}
	}
	for _, v := range secretVars {
		if v == "FUNDUQ_DATABASE_URL" {
			// The doors go through RDS Proxy, the broker to the instance.
			if doors[v] != "door_database_url" || broker[v] != "database_url" || !composed[doors[v]] || !composed[broker[v]] {
				t.Errorf("%s: doors read key %q (want door_database_url), broker hosts %q (want database_url); the foundation composes %v",
					v, doors[v], broker[v], slices.Sorted(maps.Keys(composed)))
			}
			continue
		}
		if doors[v] == "" || doors[v] != broker[v] || !composed[doors[v]] {
			t.Errorf("%s: doors read key %q, broker hosts %q; the foundation composes %v", v, doors[v], broker[v], slices.Sorted(maps.Keys(composed)))
		}
	}
	if len(doors) != len(secretVars) || len(broker) != len(secretVars)+len(brokerSecretVars) {
		t.Errorf("secret variables: doors %v, broker %v, want exactly %v (and the broker's %v)", doors, broker, secretVars, brokerSecretVars)
	}
}
