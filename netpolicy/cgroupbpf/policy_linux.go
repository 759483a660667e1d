package cgroupbpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// bootNow is CLOCK_BOOTTIME in ns, the clock of bpf_ktime_get_boot_ns.
func bootNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("cgroupbpf: CLOCK_BOOTTIME: " + err.Error()) // Linux >= 2.6.39 always has it
	}
	return uint64(ts.Nano())
}

// wallClock returns a function converting boot-time stamps into
// wall-clock times, all with the same offset.
func wallClock() func(boot uint64) time.Time {
	now, b := time.Now(), bootNow()
	return func(boot uint64) time.Time { return now.Add(-time.Duration(int64(b - boot))) }
}

// mapErr wraps the errors of a full map in ErrFull.
func mapErr(what string, err error) error {
	if errors.Is(err, unix.E2BIG) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.ENOMEM) {
		return fmt.Errorf("%w: %s: %w", ErrFull, what, err)
	}
	return fmt.Errorf("cgroupbpf: %s: %w", what, err)
}

// Allow adds rules. They apply from the next connect or sendmsg on, in
// ModePolicy. A rule for a prefix also applies within every longer prefix
// of other rules (10.0.0.0/8:443 and 10.1.0.0/16:80 allow 10.1.2.3:443).
// Rules are only ever added: an agent's turn gets a fresh Programs. On
// error (ErrInvalid, ErrFull) the rule that failed and those after it are
// not added; those before it are.
func (p *Programs) Allow(rules ...Rule) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return err
		}
		prefix := normalPrefix(r.Prefix)
		set, m := p.rules6, p.m(mapRules6)
		if prefix.Addr().Is4() {
			set, m = p.rules4, p.m(mapRules4)
		}
		changed, undo, err := set.add(prefix, ruleEntries(r.Ports, r.Protocols, 0))
		if err != nil {
			return err
		}
		for i, pv := range changed {
			if err := m.Update(lpmKey(pv.prefix), encodePorts(pv.entries), ebpf.UpdateAny); err != nil {
				undo()
				// Put back what the trie had for the prefixes already
				// written (best effort: only the first, a new key, can
				// fail for room).
				for _, w := range changed[:i] {
					if _, ok := set.rules[w.prefix]; !ok {
						m.Delete(lpmKey(w.prefix))
						continue
					}
					m.Update(lpmKey(w.prefix), encodePorts(set.effective(w.prefix)), ebpf.UpdateAny)
				}
				return mapErr(fmt.Sprintf("add rule %v", prefix), err)
			}
		}
	}
	return nil
}

// AllowAddr allows one address for ttl, on ports (empty: all) and protos
// (0: TCP and UDP): the DNS forwarder calls it with the addresses it is
// about to answer. Calls for the same address add up; the same ports and
// protocols again extend the expiry. Expiry applies to new connects and
// sendmsgs only: established connections and connected UDP sockets live
// on. IPv4-mapped addresses are the IPv4 address.
func (p *Programs) AllowAddr(addr netip.Addr, ports []PortRange, protos Proto, ttl time.Duration) error {
	if !addr.IsValid() || addr.Zone() != "" {
		return fmt.Errorf("%w: address %v", ErrInvalid, addr)
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: ttl %v must be positive (use Allow for rules that do not expire)", ErrInvalid, ttl)
	}
	if err := validatePorts(ports, protos); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	key := addr.Unmap().As16()
	now := bootNow()
	es := mergeExpiring(append(p.addrs[key], ruleEntries(ports, protos, now+uint64(ttl))...), now)
	if len(es) > MaxPortRanges {
		return fmt.Errorf("%w: %v would need %d port ranges; one address holds %d", ErrFull, addr, len(es), MaxPortRanges)
	}
	if err := p.m(mapAddrs).Update(key[:], encodePorts(es), ebpf.UpdateAny); err != nil {
		return mapErr(fmt.Sprintf("allow %v", addr), err)
	}
	p.addrs[key] = es
	return nil
}

// PruneAddrs removes the expired entries of AllowAddr from the map (the
// programs ignore them anyway; this frees room).
func (p *Programs) PruneAddrs() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	now := bootNow()
	m := p.m(mapAddrs)
	for key, es := range p.addrs {
		kept := mergeExpiring(es, now)
		if len(kept) == len(es) {
			continue
		}
		var err error
		if len(kept) == 0 {
			err = m.Delete(key[:])
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				err = nil
			}
		} else {
			err = m.Update(key[:], encodePorts(kept), ebpf.UpdateAny)
		}
		if err != nil {
			return fmt.Errorf("cgroupbpf: prune %v: %w", netip.AddrFrom16(key).Unmap(), err)
		}
		if len(kept) == 0 {
			delete(p.addrs, key)
		} else {
			p.addrs[key] = kept
		}
	}
	return nil
}

// Destinations returns the audit counters: one per (destination, protocol,
// verdict) decided since Load. Read them after the workload stopped for
// exact figures: a map that changes while it is read can be read with an
// entry missed or twice.
func (p *Programs) Destinations() ([]Destination, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	var out []Destination
	wall := wallClock()
	k, v := make([]byte, ckSize), make([]byte, cvSize)
	it := p.m(mapCounters).Iterate()
	for it.Next(&k, &v) {
		rd, ok := decodeDestination(k, v)
		if !ok {
			continue
		}
		rd.d.First, rd.d.Last = wall(rd.first), wall(rd.last)
		out = append(out, rd.d)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("cgroupbpf: read destinations: %w", err)
	}
	return out, nil
}

// Stats returns the programs' own counters.
func (p *Programs) Stats() (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Stats{}, ErrClosed
	}
	v := make([]byte, stSize)
	if err := p.m(mapStats).Lookup(uint32(0), &v); err != nil {
		return Stats{}, fmt.Errorf("cgroupbpf: read stats: %w", err)
	}
	return Stats{
		EventsLost:          binary.NativeEndian.Uint64(v[stLost:]),
		DestinationsDropped: binary.NativeEndian.Uint64(v[stFull:]),
	}, nil
}
