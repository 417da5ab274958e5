package deploytest

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// repoRoot is the module root (two levels above this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// cfn is a parsed CloudFormation/SAM template. Short-form intrinsic tags
// (!Ref, !GetAtt, !Sub, !If, ...) stay on the nodes as yaml.Node.Tag.
type cfn struct {
	path string
	root *yaml.Node // the top-level mapping
}

func loadTemplate(t *testing.T, rel string) *cfn {
	t.Helper()
	path := filepath.Join(repoRoot(t), rel)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatalf("%s: not a YAML mapping", rel)
	}
	return &cfn{path: rel, root: doc.Content[0]}
}

// get returns the value under key in a mapping node, or nil.
func get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, key := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var found *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				found = n.Content[i+1]
				break
			}
		}
		n = found
	}
	return n
}

// keys lists a mapping's keys.
func keys(n *yaml.Node) []string {
	var out []string
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, n.Content[i].Value)
	}
	return out
}

// walk visits n and every node below it.
func walk(n *yaml.Node, visit func(*yaml.Node)) {
	if n == nil {
		return
	}
	visit(n)
	for _, c := range n.Content {
		walk(c, visit)
	}
}

var pseudoParameters = map[string]bool{
	"AWS::AccountId": true, "AWS::NotificationARNs": true, "AWS::NoValue": true, "AWS::Partition": true,
	"AWS::Region": true, "AWS::StackId": true, "AWS::StackName": true, "AWS::URLSuffix": true,
}

// names are what a !Ref / !GetAtt / ${} may name in the template.
type names struct {
	params, resources, conditions map[string]bool
}

func (c *cfn) names() names {
	n := names{params: map[string]bool{}, resources: map[string]bool{}, conditions: map[string]bool{}}
	for _, k := range keys(get(c.root, "Parameters")) {
		n.params[k] = true
	}
	for _, k := range keys(get(c.root, "Conditions")) {
		n.conditions[k] = true
	}
	res := get(c.root, "Resources")
	for _, k := range keys(res) {
		n.resources[k] = true
		// Resources the SAM transform generates and lets the template name.
		switch get(res, k, "Type").Value {
		case "AWS::Serverless::Function":
			n.resources[k+"Role"] = true
		case "AWS::Serverless::Api":
			n.resources[k+".Stage"], n.resources[k+".Deployment"] = true, true
			n.resources[k+"Stage"], n.resources[k+"Deployment"] = true, true
		}
	}
	return n
}

// attributes are the Fn::GetAtt attributes CloudFormation documents for
// the resource types the templates read attributes of, so a misspelt one
// (PrimaryEndpoint for PrimaryEndPoint) fails here rather than at deploy.
var attributes = map[string][]string{
	"AWS::RDS::DBInstance": {"Endpoint.Address", "Endpoint.Port", "Endpoint.HostedZoneId", "DBInstanceArn",
		"DbiResourceId", "MasterUserSecret.SecretArn", "CertificateDetails.CAIdentifier", "CertificateDetails.ValidTill"},
	"AWS::ElastiCache::ReplicationGroup": {"PrimaryEndPoint.Address", "PrimaryEndPoint.Port", "ReaderEndPoint.Address",
		"ReaderEndPoint.Port", "ConfigurationEndPoint.Address", "ConfigurationEndPoint.Port", "ReadEndPoint.Addresses",
		"ReadEndPoint.Ports", "ReadEndPoint.Addresses.List", "ReadEndPoint.Ports.List"},
	"AWS::EC2::SecurityGroup": {"GroupId", "VpcId"},
	"AWS::EC2::VPC": {"CidrBlock", "CidrBlockAssociations", "DefaultNetworkAcl", "DefaultSecurityGroup",
		"Ipv6CidrBlocks", "VpcId"},
	"AWS::EC2::EIP": {"AllocationId", "PublicIp"},
	"AWS::EC2::Subnet": {"AvailabilityZone", "AvailabilityZoneId", "CidrBlock", "NetworkAclAssociationId", "SubnetId",
		"VpcId", "Ipv6CidrBlocks", "OutpostArn"},
	"AWS::ElasticLoadBalancingV2::LoadBalancer": {"CanonicalHostedZoneID", "DNSName", "LoadBalancerArn",
		"LoadBalancerFullName", "LoadBalancerName", "SecurityGroups"},
	"AWS::ElasticLoadBalancingV2::TargetGroup": {"LoadBalancerArns", "TargetGroupArn", "TargetGroupFullName", "TargetGroupName"},
	"AWS::EC2::LaunchTemplate":                 {"DefaultVersionNumber", "LatestVersionNumber", "LaunchTemplateId"},
	"AWS::IAM::InstanceProfile":                {"Arn"},
	"AWS::IAM::Role":                           {"Arn", "RoleId"},
	"AWS::S3::Bucket":                          {"Arn", "DomainName", "DualStackDomainName", "RegionalDomainName", "WebsiteURL"},
	"AWS::SecretsManager::Secret":              {"Id"},
	"AWS::Serverless::Function":                {"Arn"},
	"AWS::Logs::LogGroup":                      {"Arn"},
	"AWS::ApiGateway::DomainName":              {"DistributionDomainName", "DistributionHostedZoneId", "RegionalDomainName", "RegionalHostedZoneId"},
	"AWS::RDS::DBProxy":                        {"DBProxyArn", "Endpoint", "VpcId"},
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

// checkReferences reports every !Ref, !GetAtt, ${...} in a !Sub, and
// condition name that names nothing in the template.
func (c *cfn) checkReferences(t *testing.T) (count int) {
	t.Helper()
	nm := c.names()
	refOK := func(name string) bool { return nm.params[name] || nm.resources[name] || pseudoParameters[name] }
	attOK := func(name string) bool {
		res, attr, _ := strings.Cut(name, ".")
		if !nm.resources[res] {
			return false
		}
		typ := ""
		if n := get(c.root, "Resources", res, "Type"); n != nil {
			typ = n.Value
		}
		if known, ok := attributes[typ]; ok && attr != "" && !slices.Contains(known, attr) {
			return false
		}
		return true
	}
	bad := func(n *yaml.Node, what string) {
		t.Errorf("%s:%d: %s names no parameter, resource, pseudo-parameter, condition or documented attribute of the template", c.path, n.Line, what)
	}
	walk(c.root, func(n *yaml.Node) {
		switch n.Tag {
		case "!Ref":
			count++
			if !refOK(n.Value) {
				bad(n, "!Ref "+n.Value)
			}
		case "!GetAtt":
			count++
			name := n.Value
			if n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
				name = n.Content[0].Value
			}
			if !attOK(name) {
				bad(n, "!GetAtt "+name)
			}
		case "!Sub":
			count++
			str, local := n, map[string]bool{}
			if n.Kind == yaml.SequenceNode {
				str = n.Content[0]
				if len(n.Content) > 1 {
					for _, k := range keys(n.Content[1]) {
						local[k] = true
					}
				}
			}
			for _, m := range subVar.FindAllStringSubmatch(str.Value, -1) {
				v := m[1]
				if local[v] || refOK(v) || (strings.Contains(v, ".") && attOK(v)) {
					continue
				}
				bad(str, "${"+v+"} in !Sub")
			}
		case "!If":
			count++
			if n.Kind != yaml.SequenceNode || len(n.Content) != 3 || !nm.conditions[n.Content[0].Value] {
				bad(n, "!If condition")
			}
		}
		if n.Kind == yaml.MappingNode {
			if cond := get(n, "Condition"); cond != nil && cond.Kind == yaml.ScalarNode && cond.Tag == "!!str" &&
				get(n, "Type") != nil && !nm.conditions[cond.Value] {
				bad(cond, "Condition "+cond.Value)
			}
			if ref := get(n, "Ref"); ref != nil && len(n.Content) == 2 && !refOK(ref.Value) {
				bad(ref, "Ref "+ref.Value)
			}
		}
	})
	return count
}

// envTags lists the env variable names a config struct reads, and which
// of them are required (",required"), walking embedded structs.
func envTags(typ reflect.Type) (all, required []string) {
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			a, r := envTags(f.Type)
			all, required = append(all, a...), append(required, r...)
			continue
		}
		tag, ok := f.Tag.Lookup("env")
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		all = append(all, name)
		for _, o := range strings.Split(opts, ",") {
			if o == "required" {
				required = append(required, name)
			}
		}
	}
	sort.Strings(all)
	sort.Strings(required)
	return all, required
}

// No mapping in a template repeats a key. YAML forbids it, yet parsers
// differ: this package's yaml.Node walk takes the first, CloudFormation is
// reported to take the last, and the AWS CLI has refused such a template
// in `aws cloudformation deploy` ("found duplicate key"), which
// scripts/deploy runs. infra/foundation.yaml declared
// ProxyMaxConnectionsPercent twice.
func TestTemplatesHaveNoRepeatedKeys(t *testing.T) {
	for _, rel := range []string{"template.yaml", "infra/broker.yaml", foundationPath} {
		c := loadTemplate(t, rel)
		walk(c.root, func(n *yaml.Node) {
			if n.Kind != yaml.MappingNode {
				return
			}
			seen := map[string]int{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if first, ok := seen[k.Value]; ok {
					t.Errorf("%s:%d: key %s repeats the one on line %d", rel, k.Line, k.Value, first)
				}
				seen[k.Value] = k.Line
			}
		})
	}
}
