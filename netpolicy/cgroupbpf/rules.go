package cgroupbpf

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// portEntry is one allowed (range, protocols) with an optional expiry.
type portEntry struct {
	first, last uint16
	protos      Proto
	expires     uint64 // boot ns; 0 never
}

// normalPrefix is p masked, with IPv4-mapped IPv6 prefixes turned into the
// IPv4 prefix they map, so that v4-mapped destinations (checked against the
// IPv4 trie) and IPv4 ones meet the same rules.
func normalPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr()
	if a.Is4In6() {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return netip.PrefixFrom(a, p.Bits()).Masked()
}

// ruleEntries is the port entries a rule grants.
func ruleEntries(ports []PortRange, protos Proto, expires uint64) []portEntry {
	if protos == 0 {
		protos = AnyProto
	}
	if len(ports) == 0 {
		ports = []PortRange{AllPorts}
	}
	es := make([]portEntry, 0, len(ports))
	for _, p := range ports {
		es = append(es, portEntry{first: p.First, last: p.Last, protos: protos, expires: expires})
	}
	return es
}

// mergePermanent merges entries without expiry: per protocol, overlapping
// and adjacent ranges become one; a range both protocols have becomes one
// entry with both bits. The result is sorted.
func mergePermanent(es []portEntry) []portEntry {
	var per [2][]portEntry
	for i, bit := range []Proto{TCP, UDP} {
		var rs []portEntry
		for _, e := range es {
			if e.protos&bit != 0 {
				rs = append(rs, portEntry{first: e.first, last: e.last})
			}
		}
		slices.SortFunc(rs, func(a, b portEntry) int { return cmp.Compare(a.first, b.first) })
		var out []portEntry
		for _, r := range rs {
			if n := len(out); n > 0 && uint32(r.first) <= uint32(out[n-1].last)+1 {
				out[n-1].last = max(out[n-1].last, r.last)
				continue
			}
			out = append(out, r)
		}
		for j := range out {
			out[j].protos = bit
		}
		per[i] = out
	}
	out := per[0]
	for _, u := range per[1] {
		if i := slices.IndexFunc(out, func(t portEntry) bool { return t.first == u.first && t.last == u.last }); i >= 0 {
			out[i].protos |= UDP
			continue
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b portEntry) int {
		return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.last, b.last), cmp.Compare(a.protos, b.protos))
	})
	return out
}

// mergeExpiring merges dynamic entries: those expired at now go, and
// entries for the same range and protocols keep the later expiry. The result
// is sorted.
func mergeExpiring(es []portEntry, now uint64) []portEntry {
	var out []portEntry
	for _, e := range es {
		if e.expires != 0 && e.expires < now {
			continue
		}
		if i := slices.IndexFunc(out, func(o portEntry) bool {
			return o.first == e.first && o.last == e.last && o.protos == e.protos
		}); i >= 0 {
			if out[i].expires != 0 && (e.expires == 0 || e.expires > out[i].expires) {
				out[i].expires = e.expires
			}
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b portEntry) int {
		return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.last, b.last), cmp.Compare(a.protos, b.protos))
	})
	return out
}

// ruleSet holds the rules of one address family as given, and computes the
// value each prefix must have in the trie. A longest-prefix-match trie
// answers with the longest matching prefix only, so the value of a prefix
// carries its own grants merged with those of every shorter rule prefix
// that contains it: with 10.0.0.0/8:443 and 10.1.0.0/16:80, 10.1.2.3:443 is
// still allowed.
type ruleSet struct {
	rules map[netip.Prefix][]portEntry
}

func newRuleSet() *ruleSet { return &ruleSet{rules: map[netip.Prefix][]portEntry{}} }

// contains reports whether prefix p contains prefix q.
func contains(p, q netip.Prefix) bool {
	return p.Bits() <= q.Bits() && p.Contains(q.Addr())
}

func (s *ruleSet) effective(q netip.Prefix) []portEntry {
	var es []portEntry
	for p, g := range s.rules {
		if contains(p, q) {
			es = append(es, g...)
		}
	}
	return mergePermanent(es)
}

// prefixValue is the trie value one prefix must have.
type prefixValue struct {
	prefix  netip.Prefix
	entries []portEntry
}

// add records that p (normalised) grants es, and returns the trie values of
// every prefix whose value changes, p's own first (it is the only one that
// may be new to the trie), and a function that forgets the rule again
// should writing them fail. If a prefix would need more than MaxPortRanges
// entries, nothing changes and the error wraps ErrFull.
func (s *ruleSet) add(p netip.Prefix, es []portEntry) ([]prefixValue, func(), error) {
	old, had := s.rules[p]
	undo := func() {
		if had {
			s.rules[p] = old
		} else {
			delete(s.rules, p)
		}
	}
	s.rules[p] = mergePermanent(append(slices.Clone(old), es...))
	changed := []prefixValue{{prefix: p}}
	for q := range s.rules {
		if q != p && contains(p, q) {
			changed = append(changed, prefixValue{prefix: q})
		}
	}
	for i := range changed {
		v := s.effective(changed[i].prefix)
		if len(v) > MaxPortRanges {
			undo()
			return nil, nil, fmt.Errorf("%w: the rules for %v add up to %d port ranges; one prefix holds %d",
				ErrFull, changed[i].prefix, len(v), MaxPortRanges)
		}
		changed[i].entries = v
	}
	return changed, undo, nil
}
