package netpolicy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/netpolicy/cgroupbpf"
)

// Session is the egress policy of one sandbox run: the programs on its
// cgroup and the DNS forwarder. Methods are safe for concurrent use.
type Session struct {
	mode    Mode
	logf    func(string, ...any)
	progs   *cgroupbpf.Programs // nil: ModeNone, or unrestricted without BPF
	fwd     *Forwarder          // ModePolicy only
	pinDir  string
	events  *cgroupbpf.EventReader
	readers sync.WaitGroup

	mu             sync.Mutex
	denials        []Denial
	denialsDropped uint64
	closed         bool
	final          Audit
}

// Start applies cfg.Policy to the cgroup cfg.CgroupPath, before the
// workload starts:
//
//   - ModeNone: nothing to do (the sandbox gets its own network namespace
//     with loopback only; the sandbox package does that).
//   - ModePolicy: starts the DNS forwarder, loads the programs in policy
//     mode with the forwarder as the DNS redirect target, installs the
//     address rules, attaches the programs to the cgroup and pins them.
//     If BPF or cgroup2 is unavailable the error wraps ErrNotSupported:
//     the caller must not run the sandbox.
//   - ModeUnrestricted: attaches the programs in audit mode (everything
//     allowed, everything counted); where BPF is unavailable it logs that
//     and runs unaudited (Audit.Audited false).
//
// ctx bounds Start itself. The Session must be closed (after the workload
// has exited).
func Start(ctx context.Context, cfg Config) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	s := &Session{mode: cfg.Policy.Mode, logf: cfg.Logf}
	switch cfg.Policy.Mode {
	case ModeNone:
		return s, nil
	case ModePolicy:
		if err := s.startPolicy(ctx, cfg); err != nil {
			s.Close()
			return nil, err
		}
	case ModeUnrestricted:
		err := s.startPrograms(ctx, cfg, cgroupbpf.Config{Mode: cgroupbpf.ModeUnrestricted}, nil)
		if errors.Is(err, ErrNotSupported) {
			cfg.Logf("netpolicy: network unrestricted and not audited: %v", err)
			s.Close()
			return &Session{mode: ModeUnrestricted, logf: cfg.Logf}, nil
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Session) startPolicy(ctx context.Context, cfg Config) error {
	fwd, err := StartForwarder(ForwarderConfig{
		Hosts:      cfg.Policy.AllowHosts,
		Upstreams:  cfg.Upstreams,
		ResolvConf: cfg.ResolvConf,
		MinTTL:     cfg.MinTTL,
		Logf:       cfg.Logf,
	})
	if err != nil {
		return err
	}
	s.fwd = fwd
	rules := make([]cgroupbpf.Rule, 0, len(cfg.Policy.Allow))
	for _, r := range cfg.Policy.Allow {
		rules = append(rules, cgroupbpf.Rule{Prefix: r.Prefix, Ports: r.Ports, Protocols: r.Protocols})
	}
	return s.startPrograms(ctx, cfg, cgroupbpf.Config{
		Mode: cgroupbpf.ModePolicy,
		DNS:  fwd.Addr(),
		DNS6: fwd.Addr6(),
	}, rules)
}

// startPrograms loads, fills, attaches and pins the programs.
func (s *Session) startPrograms(ctx context.Context, cfg Config, bcfg cgroupbpf.Config, rules []cgroupbpf.Rule) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkCgroup2(cfg.CgroupPath); err != nil {
		return err
	}
	p, err := cgroupbpf.Load(bcfg)
	if err != nil {
		return wrapBPF("load egress programs", err)
	}
	s.progs = p
	if err := p.Allow(rules...); err != nil {
		return fmt.Errorf("netpolicy: install --allow rules: %w", err)
	}
	if s.fwd != nil {
		s.fwd.setAllower(p)
	}
	pinDir, err := pinDir(cfg)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.Attach(cfg.CgroupPath); err != nil {
		return wrapBPF("attach egress programs", err)
	}
	if err := p.Pin(pinDir); err != nil {
		return fmt.Errorf("netpolicy: pin egress programs (so they outlive a supervisor crash): %w", err)
	}
	s.pinDir = pinDir
	if s.events, err = p.Events(); err != nil {
		return fmt.Errorf("netpolicy: egress events: %w", err)
	}
	s.readers.Go(s.readEvents)
	return nil
}

// wrapBPF makes cgroupbpf's ErrNotSupported ours as well.
func wrapBPF(what string, err error) error {
	if errors.Is(err, cgroupbpf.ErrNotSupported) {
		return fmt.Errorf("%w: %s: %w", ErrNotSupported, what, err)
	}
	return fmt.Errorf("netpolicy: %s: %w", what, err)
}

func checkCgroup2(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("netpolicy: sandbox cgroup %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%w: %s is not a cgroup2 directory (the egress policy needs cgroup2)", ErrNotSupported, dir)
	}
	return nil
}

// pinDir picks (and mounts, if needed) the bpffs directory of this
// session's pins.
func pinDir(cfg Config) (string, error) {
	base := cfg.BPFFS
	if base == "" {
		var st unix.Statfs_t
		if unix.Statfs("/sys/fs/bpf", &st) == nil && st.Type == unix.BPF_FS_MAGIC {
			base = "/sys/fs/bpf/cairn"
		} else {
			base = "/run/cairn/bpffs"
		}
	}
	if err := cgroupbpf.MountBPFFS(base); err != nil {
		return "", wrapBPF("bpffs for pins (set BPFFS to a bpffs directory)", err)
	}
	name := cfg.PinName
	if name == "" {
		fi, err := os.Stat(cfg.CgroupPath)
		if err != nil {
			return "", fmt.Errorf("netpolicy: %w", err)
		}
		name = fmt.Sprintf("cgroup-%d", fi.Sys().(*syscall.Stat_t).Ino)
	}
	if name != filepath.Base(name) || name == "." || name == ".." {
		return "", ruleErr("pin name "+name, "not a plain file name", "")
	}
	return filepath.Join(base, name), nil
}

func (s *Session) readEvents() {
	for {
		ev, err := s.events.Read()
		if err != nil {
			return
		}
		if ev.Verdict != cgroupbpf.VerdictDenied {
			continue
		}
		s.mu.Lock()
		if len(s.denials) < maxDenials {
			dst := ev.Dst
			s.denials = append(s.denials, Denial{
				Time: ev.Time, PID: ev.PID, Protocol: ev.Protocol.String(), Hook: ev.Hook.String(),
				Dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()),
			})
		} else {
			s.denialsDropped++
		}
		s.mu.Unlock()
	}
}

// Forwarder is the session's DNS forwarder (ModePolicy), else nil.
func (s *Session) Forwarder() *Forwarder { return s.fwd }

// Audit returns the egress log so far; after Close, the log at Close.
// Read it once the workload has exited for exact counts.
func (s *Session) Audit() (Audit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.final, nil
	}
	return s.auditLocked()
}

func (s *Session) auditLocked() (Audit, error) {
	a := Audit{Mode: s.mode, Audited: s.progs != nil}
	names := map[netip.Addr][]string{}
	if s.fwd != nil {
		log := s.fwd.Log()
		a.DNS, a.DNSDropped = log.Queries, log.Dropped
		for _, q := range log.Queries {
			for _, addr := range q.Answers {
				if !slices.Contains(names[addr], q.Name) {
					names[addr] = append(names[addr], q.Name)
				}
			}
		}
	}
	if s.progs == nil {
		return a, nil
	}
	dests, err := s.progs.Destinations()
	if err != nil {
		return a, fmt.Errorf("netpolicy: audit: %w", err)
	}
	type key struct {
		addr    netip.Addr
		port    uint16
		proto   string
		verdict string
	}
	agg := map[key]*Destination{}
	for _, d := range dests {
		k := key{d.Dst.Addr().Unmap(), d.Dst.Port(), d.Protocol.String(), d.Verdict.String()}
		e, ok := agg[k]
		if !ok {
			e = &Destination{Addr: k.addr, Port: k.port, Protocol: k.proto, Verdict: k.verdict, First: d.First, Last: d.Last}
			agg[k] = e
		}
		e.Count += d.Count
		if d.First.Before(e.First) {
			e.First = d.First
		}
		if d.Last.After(e.Last) {
			e.Last = d.Last
		}
	}
	for _, e := range agg {
		e.Names = slices.Clone(names[e.Addr])
		slices.Sort(e.Names)
		a.Destinations = append(a.Destinations, *e)
	}
	slices.SortFunc(a.Destinations, func(x, y Destination) int {
		return cmp.Or(x.Addr.Compare(y.Addr), cmp.Compare(x.Port, y.Port), cmp.Compare(x.Protocol, y.Protocol), cmp.Compare(x.Verdict, y.Verdict))
	})
	st, err := s.progs.Stats()
	if err != nil {
		return a, fmt.Errorf("netpolicy: audit: %w", err)
	}
	a.EventsLost, a.DestinationsDropped = st.EventsLost, st.DestinationsDropped
	a.Denials = slices.Clone(s.denials)
	a.DenialsDropped = s.denialsDropped
	return a, nil
}

// Close records the final audit (Audit keeps returning it), then detaches
// and unpins the programs and stops the forwarder. Call it after the
// workload has exited: closing lifts the policy for processes still in the
// cgroup.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	var errs []error
	final, err := s.auditLocked()
	if err != nil {
		errs = append(errs, err)
	}
	s.closed = true
	s.mu.Unlock()
	if s.progs != nil {
		if err := s.progs.Close(); err != nil { // also stops the event reader
			errs = append(errs, err)
		}
	}
	s.readers.Wait()
	if s.fwd != nil {
		if err := s.fwd.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	final.Denials, final.DenialsDropped = slices.Clone(s.denials), s.denialsDropped
	s.final = final
	s.mu.Unlock()
	return errors.Join(errs...)
}
