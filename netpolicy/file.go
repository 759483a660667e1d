package netpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ReadPolicyFile reads a --net-policy file: JSON if its name ends in .json
// or its first non-blank character is '{', YAML otherwise (see ParsePolicy).
func ReadPolicyFile(path string) (Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, fmt.Errorf("netpolicy: read policy file: %w", err)
	}
	return ParsePolicy(data, path)
}

// ParsePolicy parses a policy document, YAML or JSON, strictly: unknown
// fields, duplicate fields and values of the wrong kind are errors, which
// are *FileError values with the line (name is used in messages and to
// recognise .json). An absent mode is "policy". The result is validated
// (Policy.Validate).
//
//	mode: policy                  # none, policy or unrestricted
//	allow:                        # --allow rules: strings, or objects
//	  - 10.0.0.0/8:443
//	  - cidr: 2001:db8::/32
//	    ports: [80, "8000-9000"]  # a port, "80,443", or a list
//	    protocol: tcp             # tcp or udp; default both
//	allowHosts:                   # --allow-host rules
//	  - api.github.com:443
//	  - name: "*.internal.example"
//	    ports: 443
//	    allowPrivateAnswers: true # keep answers in private ranges
//	http:                         # --http-methods rules
//	  - host: api.github.com
//	    methods: [GET, HEAD]
//	  - uploads.example.org=PUT   # the flag's syntax works too
//	httpIntercept: true           # --http-intercept: HTTPS to the hosts
//	                              # of the http rules, methods enforced
func ParsePolicy(data []byte, name string) (Policy, error) {
	fe := func(line int, format string, args ...any) error {
		return &FileError{Path: name, Line: line, Err: fmt.Errorf(format, args...)}
	}
	trimmed := bytes.TrimSpace(data)
	if strings.EqualFold(filepath.Ext(name), ".json") || bytes.HasPrefix(trimmed, []byte("{")) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			line := 0
			if se, ok := errors.AsType[*json.SyntaxError](err); ok {
				line = 1 + bytes.Count(data[:se.Offset], []byte("\n"))
			}
			return Policy{}, fe(line, "not valid JSON: %v", err)
		}
	}
	if len(trimmed) == 0 {
		return Policy{}, fe(0, "empty policy: write at least mode: policy")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlErrLine(err)
		return Policy{}, fe(line, "%s", msg)
	}
	d := &fileDecoder{name: name}
	p, err := d.policy(&doc)
	if err != nil {
		return Policy{}, err
	}
	if err := p.Validate(); err != nil {
		return Policy{}, &FileError{Path: name, Err: err}
	}
	return p, nil
}

// yamlErrLine splits a yaml.v3 syntax error ("yaml: line 3: did not find
// ...") into the line (0 if none) and the message.
func yamlErrLine(err error) (int, string) {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	rest, ok := strings.CutPrefix(s, "line ")
	if !ok {
		return 0, s
	}
	n, msg, _ := strings.Cut(rest, ": ")
	line, err2 := strconv.Atoi(n)
	if err2 != nil {
		return 0, s
	}
	return line, msg
}

type fileDecoder struct{ name string }

func (d *fileDecoder) errAt(n *yaml.Node, format string, args ...any) error {
	return &FileError{Path: d.name, Line: n.Line, Err: fmt.Errorf(format, args...)}
}

// ruleAt relabels a RuleError from a Parse function with the file's rule
// name and line.
func (d *fileDecoder) ruleAt(n *yaml.Node, what string, err error) error {
	var re *RuleError
	if errors.As(err, &re) {
		re.Rule = what
	}
	return &FileError{Path: d.name, Line: n.Line, Err: err}
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// fields walks a mapping, calling set for each known key, and fails on
// unknown and repeated keys.
func (d *fileDecoder) fields(n *yaml.Node, what string, known []string, set func(key string, v *yaml.Node) error) error {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return d.errAt(n, "%s: expected a mapping with fields %s", what, strings.Join(known, ", "))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || !contains(known, k.Value) {
			return d.errAt(k, "%s: unknown field %q (fields are %s)", what, k.Value, strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return d.errAt(k, "%s: field %q given twice", what, k.Value)
		}
		seen[k.Value] = true
		if err := set(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (d *fileDecoder) scalar(n *yaml.Node, what string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", d.errAt(n, "%s: expected a string", what)
	}
	return n.Value, nil
}

// boolean reads a YAML boolean: true or false (True, TRUE...).
func (d *fileDecoder) boolean(n *yaml.Node, what string) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, d.errAt(n, "%s: expected true or false", what)
	}
	return n.Value == "true" || n.Value == "True" || n.Value == "TRUE", nil
}

func (d *fileDecoder) seq(n *yaml.Node, what string, each func(i int, item *yaml.Node) error) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.errAt(n, "%s: expected a list", what)
	}
	for i, item := range n.Content {
		if err := each(i, resolve(item)); err != nil {
			return err
		}
	}
	return nil
}

func (d *fileDecoder) policy(doc *yaml.Node) (Policy, error) {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	p := Policy{Mode: ModePolicy}
	err := d.fields(root, "policy", []string{"mode", "allow", "allowHosts", "http", "httpIntercept"}, func(key string, v *yaml.Node) error {
		switch key {
		case "mode":
			s, err := d.scalar(v, "mode")
			if err != nil {
				return err
			}
			m, err := ParseMode(s)
			if err != nil {
				return d.ruleAt(v, "mode "+strconv.Quote(s), err)
			}
			p.Mode = m
		case "allow":
			return d.seq(v, "allow", func(i int, item *yaml.Node) error {
				r, err := d.cidrRule(item, fmt.Sprintf("allow[%d]", i))
				p.Allow = append(p.Allow, r)
				return err
			})
		case "allowHosts":
			return d.seq(v, "allowHosts", func(i int, item *yaml.Node) error {
				r, err := d.hostRule(item, fmt.Sprintf("allowHosts[%d]", i))
				p.AllowHosts = append(p.AllowHosts, r)
				return err
			})
		case "http":
			return d.seq(v, "http", func(i int, item *yaml.Node) error {
				r, err := d.methodRule(item, fmt.Sprintf("http[%d]", i))
				p.HTTP = append(p.HTTP, r)
				return err
			})
		case "httpIntercept":
			b, err := d.boolean(v, "httpIntercept")
			p.HTTPIntercept = b
			return err
		}
		return nil
	})
	return p, err
}

func (d *fileDecoder) cidrRule(n *yaml.Node, what string) (CIDRRule, error) {
	if n.Kind == yaml.ScalarNode {
		r, err := ParseAllow(n.Value)
		if err != nil {
			return r, d.ruleAt(n, what+" "+strconv.Quote(n.Value), err)
		}
		return r, nil
	}
	var cidr string
	var ports []PortRange
	var protos Proto
	err := d.fields(n, what, []string{"cidr", "ports", "protocol"}, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "cidr":
			cidr, err = d.scalar(v, what+".cidr")
		case "ports":
			ports, protos, err = d.ports(v, what+".ports", protos)
		case "protocol":
			protos, err = d.protocol(v, what+".protocol", protos)
		}
		return err
	})
	if err != nil {
		return CIDRRule{}, err
	}
	if cidr == "" {
		return CIDRRule{}, d.errAt(n, "%s: no cidr (write cidr: 10.0.0.0/8)", what)
	}
	label := fmt.Sprintf("%s %q", what, cidr)
	r := CIDRRule{Ports: ports, Protocols: protos}
	var perr error
	if r.Prefix, perr = parsePrefix(label, cidr); perr != nil {
		return CIDRRule{}, d.ruleAt(n, label, perr)
	}
	if err := r.validate(); err != nil {
		return CIDRRule{}, d.ruleAt(n, label, err)
	}
	return r, nil
}

func (d *fileDecoder) hostRule(n *yaml.Node, what string) (HostRule, error) {
	if n.Kind == yaml.ScalarNode {
		r, err := ParseAllowHost(n.Value)
		if err != nil {
			return r, d.ruleAt(n, what+" "+strconv.Quote(n.Value), err)
		}
		return r, nil
	}
	var r HostRule
	err := d.fields(n, what, []string{"name", "ports", "protocol", "allowPrivateAnswers"}, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "name":
			r.Name, err = d.scalar(v, what+".name")
			r.Name = canonicalName(r.Name)
		case "ports":
			r.Ports, r.Protocols, err = d.ports(v, what+".ports", r.Protocols)
		case "protocol":
			r.Protocols, err = d.protocol(v, what+".protocol", r.Protocols)
		case "allowPrivateAnswers":
			r.AllowPrivate, err = d.boolean(v, what+".allowPrivateAnswers")
		}
		return err
	})
	if err != nil {
		return HostRule{}, err
	}
	if err := r.validate(); err != nil {
		return HostRule{}, d.ruleAt(n, fmt.Sprintf("%s %q", what, r.Name), err)
	}
	return r, nil
}

func (d *fileDecoder) methodRule(n *yaml.Node, what string) (HostMethods, error) {
	if n.Kind == yaml.ScalarNode {
		h, err := ParseHTTPMethods(n.Value)
		if err != nil {
			return h, d.ruleAt(n, what+" "+strconv.Quote(n.Value), err)
		}
		return h, nil
	}
	var host string
	var methods []string
	err := d.fields(n, what, []string{"host", "methods"}, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "host":
			host, err = d.scalar(v, what+".host")
		case "methods":
			err = d.seq(v, what+".methods", func(_ int, item *yaml.Node) error {
				m, err := d.scalar(item, what+".methods")
				methods = append(methods, m)
				return err
			})
		}
		return err
	})
	if err != nil {
		return HostMethods{}, err
	}
	if len(methods) == 0 {
		return HostMethods{}, d.errAt(n, "%s: no methods (write methods: [GET, HEAD])", what)
	}
	h, perr := ParseHTTPMethods(host + "=" + strings.Join(methods, ","))
	if perr != nil {
		return HostMethods{}, d.ruleAt(n, fmt.Sprintf("%s %q", what, host), perr)
	}
	return h, nil
}

// ports reads a ports field: a number, a string in --allow syntax, or a
// list of those. A protocol written in it must agree with protos.
func (d *fileDecoder) ports(n *yaml.Node, what string, protos Proto) ([]PortRange, Proto, error) {
	var items []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		items = []*yaml.Node{n}
	case yaml.SequenceNode:
		items = n.Content
	default:
		return nil, 0, d.errAt(n, "%s: expected a port, a string like \"80,443\" or a list", what)
	}
	var out []PortRange
	for _, it := range items {
		it = resolve(it)
		s, err := d.scalar(it, what)
		if err != nil {
			return nil, 0, err
		}
		prs, pr, err := parsePorts(what, s)
		if err != nil {
			return nil, 0, d.ruleAt(it, what+" "+strconv.Quote(s), err)
		}
		if pr != 0 {
			if protos != 0 && protos != pr {
				return nil, 0, d.errAt(it, "%s: protocol %s disagrees with %s", what, pr, protos)
			}
			protos = pr
		}
		if len(prs) == 0 {
			return nil, protos, nil // "*": every port
		}
		out = append(out, prs...)
	}
	return out, protos, nil
}

func (d *fileDecoder) protocol(n *yaml.Node, what string, protos Proto) (Proto, error) {
	s, err := d.scalar(n, what)
	if err != nil {
		return 0, err
	}
	var p Proto
	switch strings.ToLower(s) {
	case "tcp":
		p = TCP
	case "udp":
		p = UDP
	case "any", "both":
		p = 0
	default:
		return 0, d.errAt(n, "%s: unknown protocol %q (write tcp or udp, or leave it out for both)", what, s)
	}
	if protos != 0 && p != protos {
		return 0, d.errAt(n, "%s: %s disagrees with the protocol in ports (%s)", what, s, protos)
	}
	return p, nil
}
