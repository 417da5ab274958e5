package deploytest

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// deployed is c's Resources as CloudFormation creates them for the given
// parameter values (a parameter not given takes its Default): a resource
// whose Condition is false is left out, and every !If is replaced by the
// branch its condition picks (a branch of !Ref AWS::NoValue drops the key
// or the list item). Conditions may use !Not, !Equals, !And, !Or,
// !Condition and !Ref of a parameter; anything else fails the test.
func deployed(t *testing.T, c *cfn, params map[string]string) *yaml.Node {
	t.Helper()
	value := func(name string) string {
		if v, ok := params[name]; ok {
			return v
		}
		if d := get(c.root, "Parameters", name, "Default"); d != nil {
			return d.Value
		}
		t.Fatalf("%s: parameter %s has no value and no Default", c.path, name)
		return ""
	}
	conds := get(c.root, "Conditions")
	var cond func(n *yaml.Node) bool
	scalar := func(n *yaml.Node) string {
		switch {
		case n.Tag == "!Ref":
			return value(n.Value)
		case n.Kind == yaml.ScalarNode && (n.Tag == "" || n.Tag == "!!str"):
			return n.Value
		}
		t.Fatalf("%s: a condition compares %s %q, which this model does not evaluate", c.path, n.Tag, n.Value)
		return ""
	}
	cond = func(n *yaml.Node) bool {
		switch n.Tag {
		case "!Condition":
			def := get(conds, n.Value)
			if def == nil {
				t.Fatalf("%s: no condition %s", c.path, n.Value)
			}
			return cond(def)
		case "!Not":
			return !cond(n.Content[0])
		case "!Equals":
			return scalar(n.Content[0]) == scalar(n.Content[1])
		case "!And", "!Or":
			and := n.Tag == "!And"
			for _, x := range n.Content {
				if cond(x) != and {
					return !and
				}
			}
			return and
		}
		t.Fatalf("%s: a condition of %s, which this model does not evaluate", c.path, n.Tag)
		return false
	}
	named := func(name string) bool {
		def := get(conds, name)
		if def == nil {
			t.Fatalf("%s: no condition %s", c.path, name)
		}
		return cond(def)
	}
	noValue := func(n *yaml.Node) bool { return n.Tag == "!Ref" && n.Value == "AWS::NoValue" }
	var pick func(n *yaml.Node) *yaml.Node
	pick = func(n *yaml.Node) *yaml.Node {
		if n.Tag == "!If" && n.Kind == yaml.SequenceNode && len(n.Content) == 3 {
			if named(n.Content[0].Value) {
				return pick(n.Content[1])
			}
			return pick(n.Content[2])
		}
		out := *n
		out.Content = nil
		for i := 0; i < len(n.Content); i++ {
			if n.Kind == yaml.MappingNode {
				v := pick(n.Content[i+1])
				if !noValue(v) {
					out.Content = append(out.Content, n.Content[i], v)
				}
				i++
				continue
			}
			if v := pick(n.Content[i]); !noValue(v) {
				out.Content = append(out.Content, v)
			}
		}
		return &out
	}
	res := get(c.root, "Resources")
	out := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(res.Content); i += 2 {
		if rc := get(res.Content[i+1], "Condition"); rc != nil && !named(rc.Value) {
			continue
		}
		out.Content = append(out.Content, res.Content[i], pick(res.Content[i+1]))
	}
	return out
}
