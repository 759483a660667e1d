package netpolicy

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	full := Policy{
		Mode: ModePolicy,
		Allow: []CIDRRule{
			{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []PortRange{pr(443, 443)}},
			{Prefix: netip.MustParsePrefix("2001:db8::/32"), Ports: []PortRange{pr(80, 80), pr(8000, 9000)}, Protocols: TCP},
		},
		AllowHosts: []HostRule{
			{Name: "api.github.com", Ports: []PortRange{pr(443, 443)}},
			{Name: "*.internal.example", Ports: []PortRange{pr(443, 443)}, AllowPrivate: true},
		},
		HTTP: []HostMethods{
			{Host: "api.github.com", Methods: []string{"GET", "HEAD"}},
			{Host: "x.internal.example", Methods: []string{"PUT"}},
		},
		HTTPIntercept: true,
	}
	good := []struct {
		name, file, data string
		want             Policy
	}{
		{"YAML", "p.yaml", `
mode: policy
allow:
  - 10.0.0.0/8:443
  - cidr: 2001:db8::/32
    ports: [80, "8000-9000"]
    protocol: tcp
allowHosts:
  - api.github.com:443
  - name: "*.internal.example"
    ports: 443
    allowPrivateAnswers: true
http:
  - host: api.github.com
    methods: [GET, HEAD]
  - x.internal.example=PUT
httpIntercept: true
`, full},
		{"JSON", "p.json", `{
	"mode": "policy",
	"allow": ["10.0.0.0/8:443", {"cidr": "2001:db8::/32", "ports": "80,8000-9000/tcp"}],
	"allowHosts": ["api.github.com:443", {"name": "*.internal.example", "ports": [443], "allowPrivateAnswers": true}],
	"http": [{"host": "api.github.com", "methods": ["GET", "HEAD"]}, "x.internal.example=put"],
	"httpIntercept": true
}`, full},
		{"JSONByContent", "policy", `{"allowHosts": ["a.org"]}`, Policy{Mode: ModePolicy, AllowHosts: []HostRule{{Name: "a.org"}}}},
		{"ModeDefaultsToPolicy", "p.yaml", "allow: [1.2.3.4]\n", Policy{Mode: ModePolicy, Allow: []CIDRRule{{Prefix: netip.MustParsePrefix("1.2.3.4/32")}}}},
		{"None", "p.yaml", "mode: none\n", Policy{Mode: ModeNone}},
		{"Unrestricted", "p.yaml", "mode: unrestricted\n", Policy{Mode: ModeUnrestricted}},
		{"EmptyLists", "p.yaml", "mode: policy\nallow:\nallowHosts: []\n", Policy{Mode: ModePolicy}},
		{"Anchor", "p.yaml", "allowHosts:\n  - &h a.org:443\n  - b.org:443\nhttp:\n  - host: a.org\n    methods: [GET]\n",
			Policy{Mode: ModePolicy, AllowHosts: []HostRule{{Name: "a.org", Ports: []PortRange{pr(443, 443)}}, {Name: "b.org", Ports: []PortRange{pr(443, 443)}}},
				HTTP: []HostMethods{{Host: "a.org", Methods: []string{"GET"}}}}},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParsePolicy([]byte(c.data), c.file)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
	bad := []struct {
		name, file, data, want string
	}{
		{"Empty", "p.yaml", "  \n", "p.yaml: empty policy"},
		{"UnknownTop", "p.yaml", "mode: policy\nallow_hosts: [a.org]\n", `p.yaml:2: policy: unknown field "allow_hosts" (fields are mode, allow, allowHosts, http, httpIntercept)`},
		{"UnknownInRule", "p.yaml", "allowHosts:\n  - name: a.org\n    prots: 443\n", `p.yaml:3: allowHosts[0]: unknown field "prots"`},
		{"Twice", "p.yaml", "mode: policy\nmode: none\n", `p.yaml:2: policy: field "mode" given twice`},
		{"BadMode", "p.yaml", "mode: open\n", `p.yaml:1: mode "open": unknown network mode (use none, policy or unrestricted)`},
		{"BadCIDR", "p.yaml", "allow:\n  - 10.0.0.1/8\n", `p.yaml:2: allow[0] "10.0.0.1/8": host bits set in 10.0.0.1/8 (write 10.0.0.0/8)`},
		{"BadCIDRObject", "p.yaml", "allow:\n  - cidr: example.org\n", `p.yaml:2: allow[0] "example.org": not an address or network (use --allow-host example.org for names)`},
		{"NoCIDR", "p.yaml", "allow:\n  - ports: 443\n", `p.yaml:2: allow[0]: no cidr`},
		{"BadHost", "p.yaml", "allowHosts:\n  - '*.com'\n", `p.yaml:2: allowHosts[0] "*.com": wildcard *.com covers a whole top-level domain`},
		{"BadPort", "p.yaml", "allowHosts:\n  - name: a.org\n    ports: [443, 70000]\n", `p.yaml:3: allowHosts[0].ports "70000": bad port`},
		{"ProtoConflict", "p.yaml", "allow:\n  - cidr: 10.0.0.0/8\n    ports: 53/udp\n    protocol: tcp\n", `p.yaml:4: allow[0].protocol: tcp disagrees`},
		{"BadProto", "p.yaml", "allow:\n  - cidr: 10.0.0.0/8\n    protocol: icmp\n", `p.yaml:3: allow[0].protocol: unknown protocol "icmp"`},
		{"PrivateNotBool", "p.yaml", "allowHosts:\n  - name: a.org\n    allowPrivateAnswers: yes please\n", `p.yaml:3: allowHosts[0].allowPrivateAnswers: expected true or false`},
		{"AllowNotList", "p.yaml", "allow: 10.0.0.0/8\n", `p.yaml:1: allow: expected a list`},
		{"MethodsUncovered", "p.yaml", "allowHosts: [a.org]\nhttp:\n  - host: b.org\n    methods: [GET]\n", `p.yaml: http-methods b.org=GET: no allow-host rule allows b.org`},
		{"InterceptNotBool", "p.yaml", "allowHosts: [a.org]\nhttp: [a.org=GET]\nhttpIntercept: on\n", `p.yaml:3: httpIntercept: expected true or false`},
		{"InterceptWithoutRules", "p.yaml", "allowHosts: [a.org]\nhttpIntercept: true\n", `p.yaml: http-intercept: no HTTP method rules`},
		{"InterceptWithNone", "p.yaml", "mode: none\nhttpIntercept: true\n", `http-intercept: rules need network mode policy, not none`},
		{"NoMethods", "p.yaml", "allowHosts: [a.org]\nhttp:\n  - host: a.org\n", `p.yaml:3: http[0]: no methods`},
		{"RulesWithNone", "p.yaml", "mode: none\nallow: [10.0.0.0/8]\n", `rules need network mode policy, not none`},
		{"YAMLSyntax", "p.yaml", "allow:\n  - [unclosed\n", `p.yaml:1: did not find expected ',' or ']'`},
		{"JSONSyntax", "p.json", "{\n  \"mode\": \"policy\",\n}\n", `p.json:3: not valid JSON`},
		{"JSONUnknown", "p.json", "{\n  \"mode\": \"policy\",\n  \"allowed\": []\n}\n", `p.json:3: policy: unknown field "allowed"`},
		{"NotMapping", "p.yaml", "- a.org\n", `p.yaml:1: policy: expected a mapping`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(c.data), c.file)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v does not match ErrInvalid", err)
			}
		})
	}
}

func TestReadPolicyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net.yml")
	if err := os.WriteFile(path, []byte("allowHosts: [api.github.com:443]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := ReadPolicyFile(path)
	if err != nil || p.Mode != ModePolicy || len(p.AllowHosts) != 1 {
		t.Fatalf("got %+v, %v", p, err)
	}
	if _, err := ReadPolicyFile(path + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
