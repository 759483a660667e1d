package httpproxy

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// rule is a HostRule normalized: methods upper case, nil for any.
type rule struct {
	methods []string
	ports   []uint16
}

// hostRules are the rules of one pattern.
type hostRules struct {
	pattern string
	rules   []rule
}

// ruleSet finds the most specific pattern for a host.
type ruleSet struct {
	exact map[string]*hostRules
	wild  []*hostRules // "*.suffix", longest suffix first
}

func newRuleSet(rules []HostRule) *ruleSet {
	rs := &ruleSet{exact: make(map[string]*hostRules)}
	byPattern := make(map[string]*hostRules)
	for _, r := range rules {
		pat, _ := normalizePattern(r.Host) // Validate checked it
		h := byPattern[pat]
		if h == nil {
			h = &hostRules{pattern: pat}
			byPattern[pat] = h
			if strings.HasPrefix(pat, "*.") {
				rs.wild = append(rs.wild, h)
			} else {
				rs.exact[pat] = h
			}
		}
		var nr rule
		for _, m := range r.Methods {
			nr.methods = append(nr.methods, strings.ToUpper(m))
		}
		nr.ports = slices.Clone(r.Ports)
		h.rules = append(h.rules, nr)
	}
	sort.SliceStable(rs.wild, func(i, j int) bool { return len(rs.wild[i].pattern) > len(rs.wild[j].pattern) })
	return rs
}

// match returns the rules for host (normalized), or nil if no pattern
// matches it.
func (rs *ruleSet) match(host string) *hostRules {
	if h := rs.exact[host]; h != nil {
		return h
	}
	for _, h := range rs.wild {
		if strings.HasSuffix(host, h.pattern[1:]) { // ".suffix": a strict subdomain
			return h
		}
	}
	return nil
}

// portAllowed reports whether some rule allows port.
func (h *hostRules) portAllowed(port uint16) bool {
	for _, r := range h.rules {
		if len(r.ports) == 0 || slices.Contains(r.ports, port) {
			return true
		}
	}
	return false
}

// allowed reports whether some rule allows method on port.
func (h *hostRules) allowed(method string, port uint16) bool {
	for _, r := range h.rules {
		if (len(r.ports) == 0 || slices.Contains(r.ports, port)) && (len(r.methods) == 0 || slices.Contains(r.methods, method)) {
			return true
		}
	}
	return false
}

// describe says what the rules allow, for denial messages:
// `rule "api.example.org" allows GET, HEAD on port 443`.
func (h *hostRules) describe() string {
	var parts []string
	for _, r := range h.rules {
		m := "any method"
		if len(r.methods) > 0 {
			m = strings.Join(r.methods, ", ")
		}
		p := "any port"
		if len(r.ports) > 0 {
			ps := make([]string, len(r.ports))
			for i, port := range r.ports {
				ps[i] = strconv.Itoa(int(port))
			}
			p = "port " + strings.Join(ps, ", ")
		}
		parts = append(parts, m+" on "+p)
	}
	return "rule " + strconv.Quote(h.pattern) + " allows " + strings.Join(parts, "; ")
}
