package deploytest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/awslabs/goformation/v7/schema"
	"gopkg.in/yaml.v3"
)

// The templates are checked against the CloudFormation and SAM resource
// schemas goformation ships (schema.CloudformationSchema, schema.SamSchema:
// JSON Schema draft-04 generated from AWS's resource specification), so a
// misspelt property, a property on the wrong resource, a missing required
// one, a value of the wrong shape or outside an enum fails here rather than
// at deploy. Intrinsic functions (!Ref, !Sub, ...) stand for a value of any
// type; both branches of an !If are checked. The walker below implements the
// part of draft-04 those schemas use ($ref, anyOf, type, properties,
// additionalProperties, patternProperties, required, items, enum);
// CloudFormation coerces scalars, so scalar types are interchangeable.

// newerThanSchema are properties AWS added after goformation's last schema
// (v7.14.9, 2024-04), with where they are documented; the check takes them
// as it takes the schema's own.
var newerThanSchema = map[string]map[string]any{
	// API Gateway REST response streaming (2025-11, "response-transfer-mode"
	// in the API Gateway developer guide) reached SAM's Api event source in
	// serverless-application-model PR #3881 (2026-01-30).
	// TimeoutInMillis is older (SAM developer guide, sam-property-function-api)
	// but missing from goformation's hand-kept SAM part.
	"AWS::Serverless::Function.ApiEvent": {
		"ResponseTransferMode": map[string]any{"type": "string", "enum": []any{"BUFFERED", "STREAM"}},
		"TimeoutInMillis":      map[string]any{"type": "number"},
	},
}

// wrongInSchema are properties goformation's schema gets wrong, each
// replaced by the shape AWS documents. SAM's Api GatewayResponses is a map
// from an API Gateway response type (API Reference, GatewayResponse
// responseType) to a GatewayResponse object (SAM developer guide,
// sam-property-api-gatewayresponse: ResponseParameters, ResponseTemplates,
// StatusCode); goformation has it as a map of strings, which would refuse
// every response and pass any string.
var wrongInSchema = map[string]map[string]any{
	"AWS::Serverless::Api": {
		"GatewayResponses": map[string]any{
			"type": "object",
			"patternProperties": map[string]any{
				"^(DEFAULT_4XX|DEFAULT_5XX|RESOURCE_NOT_FOUND|UNAUTHORIZED|INVALID_API_KEY|ACCESS_DENIED|" +
					"AUTHORIZER_FAILURE|AUTHORIZER_CONFIGURATION_ERROR|INVALID_SIGNATURE|EXPIRED_TOKEN|" +
					"MISSING_AUTHENTICATION_TOKEN|INTEGRATION_FAILURE|INTEGRATION_TIMEOUT|API_CONFIGURATION_ERROR|" +
					"UNSUPPORTED_MEDIA_TYPE|BAD_REQUEST_PARAMETERS|BAD_REQUEST_BODY|REQUEST_TOO_LARGE|THROTTLED|" +
					"QUOTA_EXCEEDED|WAF_FILTERED)$": map[string]any{
					"type":                 "object",
					"additionalProperties": false,
					"properties": map[string]any{
						"ResponseParameters": map[string]any{
							"type":                 "object",
							"additionalProperties": false,
							"properties": map[string]any{
								"Headers":      map[string]any{"type": "object"},
								"Paths":        map[string]any{"type": "object"},
								"QueryStrings": map[string]any{"type": "object"},
							},
						},
						"ResponseTemplates": map[string]any{"type": "object"},
						"StatusCode":        map[string]any{"type": "string"},
					},
				},
			},
			"additionalProperties": false,
		},
	},
}

type jsonSchema struct {
	root map[string]any
	defs map[string]any
}

var (
	schemaOnce sync.Once
	cfnSchema  *jsonSchema
	samSchema  *jsonSchema
	schemaErr  error
)

func loadSchemas() {
	parse := func(src string) *jsonSchema {
		var root map[string]any
		if err := json.Unmarshal([]byte(src), &root); err != nil {
			schemaErr = err
			return nil
		}
		defs, _ := root["definitions"].(map[string]any)
		for def, props := range newerThanSchema {
			d, ok := defs[def].(map[string]any)
			if !ok {
				continue
			}
			p, _ := d["properties"].(map[string]any)
			for k, v := range props {
				if _, exists := p[k]; !exists {
					p[k] = v
				}
			}
		}
		for def, props := range wrongInSchema {
			d, _ := defs[def].(map[string]any)
			outer, _ := d["properties"].(map[string]any)
			inner, _ := outer["Properties"].(map[string]any)
			p, _ := inner["properties"].(map[string]any)
			for k, v := range props {
				if _, exists := p[k]; exists {
					p[k] = v
				}
			}
		}
		return &jsonSchema{root: root, defs: defs}
	}
	cfnSchema = parse(schema.CloudformationSchema)
	samSchema = parse(schema.SamSchema)
}

// intrinsicTags are CloudFormation's short-form intrinsic functions.
var intrinsicTags = map[string]bool{"!Ref": true, "!Sub": true, "!GetAtt": true, "!If": true, "!Join": true,
	"!Select": true, "!Split": true, "!GetAZs": true, "!Cidr": true, "!Base64": true, "!FindInMap": true,
	"!ImportValue": true, "!Equals": true, "!Not": true, "!And": true, "!Or": true, "!Condition": true,
	"!Transform": true, "!Length": true, "!ToJsonString": true}

// intrinsic reports whether n stands for a value computed at deploy time.
func intrinsic(n *yaml.Node) bool {
	if intrinsicTags[n.Tag] {
		return true
	}
	if n.Kind == yaml.MappingNode && len(n.Content) == 2 {
		k := n.Content[0].Value
		return k == "Ref" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

type schemaCheck struct {
	s *jsonSchema
}

func (c *schemaCheck) resolve(sch map[string]any) map[string]any {
	for i := 0; i < 8; i++ {
		ref, ok := sch["$ref"].(string)
		if !ok {
			return sch
		}
		name := strings.TrimPrefix(ref, "#/definitions/")
		d, ok := c.s.defs[name].(map[string]any)
		if !ok {
			return map[string]any{}
		}
		sch = d
	}
	return sch
}

func scalarKind(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode }

// check validates n against sch; it returns the problems, each prefixed
// with where.
func (c *schemaCheck) check(where string, sch map[string]any, n *yaml.Node) []string {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	sch = c.resolve(sch)
	if intrinsic(n) {
		// Both branches of an !If must fit; AWS::NoValue drops the key.
		if n.Tag == "!If" && n.Kind == yaml.SequenceNode && len(n.Content) == 3 {
			var out []string
			for _, b := range n.Content[1:] {
				if b.Tag == "!Ref" && b.Value == "AWS::NoValue" {
					continue
				}
				out = append(out, c.check(where, sch, b)...)
			}
			return out
		}
		return nil
	}
	if alts, ok := sch["anyOf"].([]any); ok {
		var first []string
		for _, alt := range alts {
			a, _ := alt.(map[string]any)
			errs := c.check(where, a, n)
			if len(errs) == 0 {
				return nil
			}
			if first == nil || len(errs) < len(first) {
				first = errs
			}
		}
		return first
	}
	var out []string
	bad := func(format string, args ...any) { out = append(out, where+": "+fmt.Sprintf(format, args...)) }
	if t, ok := sch["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, fmt.Sprint(x))
			}
		}
		fits := false
		for _, ty := range types {
			switch ty {
			case "object":
				fits = fits || n.Kind == yaml.MappingNode
			case "array":
				fits = fits || n.Kind == yaml.SequenceNode
			default: // string, number, integer, boolean: CloudFormation coerces scalars
				fits = fits || scalarKind(n)
			}
		}
		if !fits {
			bad("want %s, got %s", strings.Join(types, " or "), kindName(n))
			return out
		}
	}
	if enum, ok := sch["enum"].([]any); ok && scalarKind(n) {
		found := false
		for _, e := range enum {
			if fmt.Sprint(e) == n.Value {
				found = true
			}
		}
		if !found {
			bad("%q is not one of %v", n.Value, enum)
		}
	}
	switch n.Kind {
	case yaml.MappingNode:
		props, _ := sch["properties"].(map[string]any)
		patterns, _ := sch["patternProperties"].(map[string]any)
		present := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			present[k] = true
			if p, ok := props[k].(map[string]any); ok {
				out = append(out, c.check(where+"."+k, p, v)...)
				continue
			}
			matched := false
			for pat, p := range patterns {
				if regexp.MustCompile(pat).MatchString(k) {
					matched = true
					ps, _ := p.(map[string]any)
					out = append(out, c.check(where+"."+k, ps, v)...)
				}
			}
			if matched {
				continue
			}
			switch ap := sch["additionalProperties"].(type) {
			case bool:
				if !ap {
					bad("unknown property %s (known: %s)", k, strings.Join(slices.Sorted(mapKeys(props)), ", "))
				}
			case map[string]any:
				out = append(out, c.check(where+"."+k, ap, v)...)
			}
		}
		if req, ok := sch["required"].([]any); ok {
			for _, r := range req {
				if !present[fmt.Sprint(r)] {
					bad("missing required property %s", r)
				}
			}
		}
	case yaml.SequenceNode:
		if items, ok := sch["items"].(map[string]any); ok {
			for i, el := range n.Content {
				out = append(out, c.check(fmt.Sprintf("%s[%d]", where, i), items, el)...)
			}
		}
	}
	return out
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("the scalar %q", n.Value)
}

// checkTemplateSchema validates every resource against its type's
// definition and the template's other sections against the root schema.
func checkTemplateSchema(t *testing.T, c *cfn, s *jsonSchema) {
	t.Helper()
	ch := &schemaCheck{s: s}
	rootProps, _ := s.root["properties"].(map[string]any)
	var problems []string
	for _, section := range keys(c.root) {
		v := get(c.root, section)
		if section == "Resources" {
			for _, name := range keys(v) {
				res := get(v, name)
				typ := get(res, "Type")
				if typ == nil {
					problems = append(problems, name+": no Type")
					continue
				}
				def, ok := s.defs[typ.Value].(map[string]any)
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: unknown resource type %s", name, typ.Value))
					continue
				}
				problems = append(problems, ch.check(name, def, res)...)
			}
			continue
		}
		sec, ok := rootProps[section].(map[string]any)
		if !ok && section == "Rules" {
			continue // a template section goformation's root schema lacks (CloudFormation "Rules syntax")
		}
		if !ok {
			problems = append(problems, "unknown top-level section "+section)
			continue
		}
		problems = append(problems, ch.check(section, sec, v)...)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", c.path, p)
	}
}

func schemas(t *testing.T) (cfn, sam *jsonSchema) {
	t.Helper()
	schemaOnce.Do(loadSchemas)
	if schemaErr != nil {
		t.Fatal(schemaErr)
	}
	return cfnSchema, samSchema
}

// Every template against the resource schemas.
func TestTemplatesMatchResourceSchemas(t *testing.T) {
	cfnS, samS := schemas(t)
	checkTemplateSchema(t, loadTemplate(t, "template.yaml"), samS)
	checkTemplateSchema(t, loadTemplate(t, foundationPath), cfnS)
	checkTemplateSchema(t, loadTemplate(t, "infra/broker.yaml"), cfnS)
}

// The check itself catches what it is for: a misspelt property, a value of
// the wrong shape, a missing required property, a value outside an enum,
// an unknown resource type; and takes intrinsics and both !If branches.
func TestSchemaCheckCatches(t *testing.T) {
	_, samS := schemas(t)
	for name, tc := range map[string]struct {
		yaml string
		want string
	}{
		"misspelt":           {"Resources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties: {Runtime: provided.al2023, CodeUri: x, Handler: bootstrap, Timout: 3}\n", "unknown property Timout"},
		"wrong shape":        {"Resources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties: {CodeUri: x, Handler: b, Runtime: r, Architectures: arm64}\n", "Architectures: want array"},
		"missing":            {"Resources:\n  M:\n    Type: AWS::ApiGateway::BasePathMapping\n    Properties: {RestApiId: x}\n", "missing required property DomainName"},
		"enum":               {"Resources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties:\n      CodeUri: x\n      Events:\n        A: {Type: Api, Properties: {Path: /x, Method: GET, ResponseTransferMode: STREAMING}}\n", `"STREAMING" is not one of`},
		"unknown type":       {"Resources:\n  F:\n    Type: AWS::Serverless::Functon\n", "unknown resource type"},
		"in an If":           {"Conditions: {C: !Equals [a, b]}\nResources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties:\n      CodeUri: x\n      Environment: !If [C, {Variables: {A: b}}, {Varables: {A: b}}]\n", "unknown property Varables"},
		"a gateway response": {"Resources:\n  A:\n    Type: AWS::Serverless::Api\n    Properties:\n      StageName: s\n      GatewayResponses:\n        THROTTLED: {StatusCode: 429, ResponseTemplates: {a: b}}\n        UNAUTHORIZED: {StatusCod: 401}\n", "unknown property StatusCod"},
		"a response type":    {"Resources:\n  A:\n    Type: AWS::Serverless::Api\n    Properties:\n      StageName: s\n      GatewayResponses:\n        THROTTLE: {StatusCode: 429}\n", "unknown property THROTTLE"},
		"intrinsics fit":     {"Resources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties: {CodeUri: !Ref X, Timeout: !Ref T, Architectures: !Split [',', !Ref A], Environment: !If [C, !Ref AWS::NoValue, {Variables: {}}]}\n", ""},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(tc.yaml), &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rt := &recorder{T: t}
		checkTemplateSchemaInto(rt, &cfn{path: name, root: doc.Content[0]}, samS)
		got := strings.Join(rt.errs, "\n")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want one containing %q", name, got, tc.want)
		}
	}
}

// recorder collects what checkTemplateSchema reports instead of failing.
type recorder struct {
	*testing.T
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

type errorer interface {
	Helper()
	Errorf(string, ...any)
}

func checkTemplateSchemaInto(t errorer, c *cfn, s *jsonSchema) {
	t.Helper()
	ch := &schemaCheck{s: s}
	for _, name := range keys(get(c.root, "Resources")) {
		res := get(c.root, "Resources", name)
		def, ok := s.defs[get(res, "Type").Value].(map[string]any)
		if !ok {
			t.Errorf("%s: unknown resource type %s", name, get(res, "Type").Value)
			continue
		}
		for _, p := range ch.check(name, def, res) {
			t.Errorf("%s", p)
		}
	}
}
