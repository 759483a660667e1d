package cgroupbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Programs are the loaded egress programs and their maps, for one sandbox.
// Methods are safe for concurrent use.
type Programs struct {
	mu     sync.Mutex
	cfg    Config
	maps   []*namedMap // in mapNames order
	progs  []*namedProg
	links  []*link.RawLink // parallel to progs once attached
	pinDir string
	closed bool
	reader *EventReader

	rules4, rules6 *ruleSet
	addrs          map[[16]byte][]portEntry
}

type namedMap struct {
	name string
	m    *ebpf.Map
}

type namedProg struct {
	name   string
	attach ebpf.AttachType
	p      *ebpf.Program
}

const (
	mapConfig   = "config"
	mapRules4   = "rules4"
	mapRules6   = "rules6"
	mapAddrs    = "addrs"
	mapCounters = "counters"
	mapEvents   = "events"
	mapStats    = "stats"
	mapOrig     = "orig_dst"
)

var mapNames = []string{mapConfig, mapRules4, mapRules6, mapAddrs, mapCounters, mapEvents, mapStats, mapOrig}

// pinNames is every name Pin creates in its directory.
func pinNames() []string {
	var names []string
	for _, n := range mapNames {
		names = append(names, "map_"+n)
	}
	for _, s := range programSpecs {
		names = append(names, s.name)
	}
	return names
}

type progSpec struct {
	name   string
	typ    ebpf.ProgramType
	attach ebpf.AttachType
	build  func(mapFDs) asm.Instructions
}

var programSpecs = []progSpec{
	{"connect4", ebpf.CGroupSockAddr, ebpf.AttachCGroupInet4Connect,
		func(fd mapFDs) asm.Instructions { return sockAddrProgram(fd, HookConnect4, false) }},
	{"connect6", ebpf.CGroupSockAddr, ebpf.AttachCGroupInet6Connect,
		func(fd mapFDs) asm.Instructions { return sockAddrProgram(fd, HookConnect6, true) }},
	{"sendmsg4", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP4Sendmsg,
		func(fd mapFDs) asm.Instructions { return sockAddrProgram(fd, HookSendmsg4, false) }},
	{"sendmsg6", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP6Sendmsg,
		func(fd mapFDs) asm.Instructions { return sockAddrProgram(fd, HookSendmsg6, true) }},
	{"recvmsg4", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP4Recvmsg,
		func(fd mapFDs) asm.Instructions { return restoreProgram(fd, false) }},
	{"recvmsg6", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP6Recvmsg,
		func(fd mapFDs) asm.Instructions { return restoreProgram(fd, true) }},
	{"getpeername4", ebpf.CGroupSockAddr, ebpf.AttachCgroupInet4GetPeername,
		func(fd mapFDs) asm.Instructions { return restoreProgram(fd, false) }},
	{"getpeername6", ebpf.CGroupSockAddr, ebpf.AttachCgroupInet6GetPeername,
		func(fd mapFDs) asm.Instructions { return restoreProgram(fd, true) }},
	{"egress", ebpf.CGroupSKB, ebpf.AttachCGroupInetEgress, egressProgram},
}

// license: the helpers used are not GPL-only; the string must still be
// one the kernel knows.
const license = "Dual MIT/GPL"

// Load checks that the kernel can run the programs, creates the maps,
// writes cfg and loads the programs. Nothing is attached yet (Attach).
// Errors wrap ErrNotSupported when BPF or a needed feature is missing, and
// ErrInvalid for a bad cfg. It needs CAP_BPF and CAP_NET_ADMIN (root).
// The network namespace of the calling thread is the host's (see
// Config.AllowHostLoopback).
func Load(cfg Config) (*Programs, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := probe(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("cgroupbpf: lift the memlock limit for BPF maps: %w", err)
	}
	cookie, err := netnsCookie()
	if err != nil {
		return nil, err
	}
	p := &Programs{
		cfg:    cfg,
		rules4: newRuleSet(),
		rules6: newRuleSet(),
		addrs:  map[[16]byte][]portEntry{},
	}
	if err := p.createMaps(); err != nil {
		p.closeAll()
		return nil, err
	}
	if err := p.m(mapConfig).Update(uint32(0), encodeConfig(cfg, cookie), ebpf.UpdateAny); err != nil {
		p.closeAll()
		return nil, fmt.Errorf("cgroupbpf: write config: %w", err)
	}
	if err := p.loadPrograms(); err != nil {
		p.closeAll()
		return nil, err
	}
	return p, nil
}

// probe reports, wrapping ErrNotSupported, the first feature the programs
// need that the kernel lacks.
func probe() error {
	check := func(what string, err error) error {
		if err == nil {
			return nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("%w: %s: %w", ErrNotSupported, what, err)
		}
		return fmt.Errorf("cgroupbpf: probe %s: %w", what, err)
	}
	for _, t := range []ebpf.ProgramType{ebpf.CGroupSockAddr, ebpf.CGroupSKB} {
		if err := check("program type "+t.String(), features.HaveProgramType(t)); err != nil {
			return err
		}
	}
	for _, t := range []ebpf.MapType{ebpf.LPMTrie, ebpf.RingBuf, ebpf.SkStorage, ebpf.Hash, ebpf.Array} {
		if err := check("map type "+t.String(), features.HaveMapType(t)); err != nil {
			return err
		}
	}
	for _, h := range []struct {
		t   ebpf.ProgramType
		fns []asm.BuiltinFunc
	}{
		{ebpf.CGroupSockAddr, []asm.BuiltinFunc{asm.FnKtimeGetBootNs, asm.FnGetNetnsCookie, asm.FnSkStorageGet,
			asm.FnRingbufReserve, asm.FnGetCurrentPidTgid, asm.FnGetCurrentCgroupId}},
		{ebpf.CGroupSKB, []asm.BuiltinFunc{asm.FnKtimeGetBootNs, asm.FnGetNetnsCookie, asm.FnSkFullsock,
			asm.FnSkbLoadBytes, asm.FnRingbufReserve, asm.FnGetCurrentPidTgid, asm.FnGetCurrentCgroupId}},
	} {
		for _, fn := range h.fns {
			if err := check(fmt.Sprintf("helper %v in %v programs", fn, h.t), features.HaveProgramHelper(h.t, fn)); err != nil {
				return err
			}
		}
	}
	return nil
}

// netnsCookie is the cookie of the calling thread's network namespace.
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("cgroupbpf: socket for the network namespace cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		if errors.Is(err, unix.ENOPROTOOPT) {
			return 0, fmt.Errorf("%w: SO_NETNS_COOKIE (Linux 5.14): %w", ErrNotSupported, err)
		}
		return 0, fmt.Errorf("cgroupbpf: network namespace cookie: %w", err)
	}
	return c, nil
}

func (p *Programs) m(name string) *ebpf.Map {
	for _, nm := range p.maps {
		if nm.name == name {
			return nm.m
		}
	}
	return nil
}

func (p *Programs) createMaps() error {
	origValue := &btf.Struct{Name: "cairn_orig_dst", Size: osSize, Members: []btf.Member{
		{Name: "addr", Type: &btf.Array{Type: &btf.Int{Name: "unsigned char", Size: 1}, Index: &btf.Int{Name: "unsigned int", Size: 4}, Nelems: 16}, Offset: osAddr * 8},
		{Name: "port", Type: &btf.Int{Name: "unsigned int", Size: 4}, Offset: osPort * 8},
		{Name: "set", Type: &btf.Int{Name: "unsigned int", Size: 4}, Offset: osSet * 8},
	}}
	specs := map[string]*ebpf.MapSpec{
		mapConfig: {Type: ebpf.Array, KeySize: 4, ValueSize: cfgSize, MaxEntries: 1},
		mapRules4: {Type: ebpf.LPMTrie, KeySize: lpm4Size, ValueSize: portsSize, MaxEntries: uint32(p.cfg.MaxRules),
			Flags: unix.BPF_F_NO_PREALLOC},
		mapRules6: {Type: ebpf.LPMTrie, KeySize: lpm6Size, ValueSize: portsSize, MaxEntries: uint32(p.cfg.MaxRules),
			Flags: unix.BPF_F_NO_PREALLOC},
		mapAddrs: {Type: ebpf.Hash, KeySize: 16, ValueSize: portsSize, MaxEntries: uint32(p.cfg.MaxAddrs),
			Flags: unix.BPF_F_NO_PREALLOC},
		mapCounters: {Type: ebpf.Hash, KeySize: ckSize, ValueSize: cvSize, MaxEntries: uint32(p.cfg.MaxDestinations),
			Flags: unix.BPF_F_NO_PREALLOC},
		mapEvents: {Type: ebpf.RingBuf, MaxEntries: uint32(p.cfg.EventBufferBytes)},
		mapStats:  {Type: ebpf.Array, KeySize: 4, ValueSize: stSize, MaxEntries: 1},
		// Socket storage needs BTF for its key and value.
		mapOrig: {Type: ebpf.SkStorage, KeySize: 4, ValueSize: osSize, Flags: unix.BPF_F_NO_PREALLOC,
			Key: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}, Value: origValue},
	}
	for _, name := range mapNames {
		spec := specs[name]
		spec.Name = "cairn_" + name
		m, err := ebpf.NewMap(spec)
		if err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("%w: create map %s: %w", ErrNotSupported, name, err)
			}
			return fmt.Errorf("cgroupbpf: create map %s: %w", name, err)
		}
		p.maps = append(p.maps, &namedMap{name: name, m: m})
	}
	return nil
}

func (p *Programs) loadPrograms() error {
	fds := mapFDs{
		config: p.m(mapConfig).FD(), rules4: p.m(mapRules4).FD(), rules6: p.m(mapRules6).FD(),
		addrs: p.m(mapAddrs).FD(), counters: p.m(mapCounters).FD(), events: p.m(mapEvents).FD(),
		stats: p.m(mapStats).FD(), orig: p.m(mapOrig).FD(),
	}
	for _, s := range programSpecs {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "cairn_" + s.name,
			Type:         s.typ,
			AttachType:   s.attach,
			Instructions: s.build(fds),
			License:      license,
		})
		if err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("%w: load program %s: %w", ErrNotSupported, s.name, err)
			}
			return fmt.Errorf("cgroupbpf: load program %s: %w", s.name, err)
		}
		p.progs = append(p.progs, &namedProg{name: s.name, attach: s.attach, p: prog})
	}
	return nil
}

// Attach attaches every program to the cgroup2 directory cgroupPath with
// bpf_link, so they also apply to every cgroup below it, whatever programs
// those get. Do it before the workload starts: sockets take their cgroup
// when created. It is all or nothing: on error no program stays attached.
// The links live as long as the Programs (Close) or, once pinned (Pin), as
// long as the pins or the cgroup.
func (p *Programs) Attach(cgroupPath string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.links != nil {
		return fmt.Errorf("cgroupbpf: already attached")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupPath, &st); err != nil {
		return fmt.Errorf("cgroupbpf: attach to %s: %w", cgroupPath, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%w: %s is not a cgroup2 directory", ErrNotSupported, cgroupPath)
	}
	dir, err := os.Open(cgroupPath)
	if err != nil {
		return fmt.Errorf("cgroupbpf: attach: %w", err)
	}
	defer dir.Close()
	var links []*link.RawLink
	for _, pr := range p.progs {
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: int(dir.Fd()), Program: pr.p, Attach: pr.attach})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			if errors.Is(err, ebpf.ErrNotSupported) {
				return fmt.Errorf("%w: attach %s to %s with bpf_link: %w", ErrNotSupported, pr.name, cgroupPath, err)
			}
			return fmt.Errorf("cgroupbpf: attach %s to %s: %w", pr.name, cgroupPath, err)
		}
		links = append(links, l)
	}
	p.links = links
	return nil
}

// Pin pins the links (Attach first) and the maps in dir, a directory on a
// bpffs (MountBPFFS) that Pin creates if needed. From then on the programs
// stay attached when this process exits or crashes, until the pins are
// removed (Close, RemovePinned) or the cgroup is: a supervisor crash fails
// closed. Pins of a removed cgroup's links are left to RemovePinned.
func (p *Programs) Pin(dir string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.links == nil {
		return fmt.Errorf("cgroupbpf: pin before attach: there are no links to pin")
	}
	if p.pinDir != "" {
		return fmt.Errorf("cgroupbpf: already pinned in %s", p.pinDir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cgroupbpf: pin: %w", err)
	}
	if err := checkBPFFS(dir); err != nil {
		return err
	}
	var pinned []interface{ Unpin() error }
	undo := func() {
		for _, x := range pinned {
			x.Unpin()
		}
	}
	for i, l := range p.links {
		if err := l.Pin(filepath.Join(dir, p.progs[i].name)); err != nil {
			undo()
			return fmt.Errorf("cgroupbpf: pin link %s: %w", p.progs[i].name, err)
		}
		pinned = append(pinned, l)
	}
	for _, nm := range p.maps {
		if err := nm.m.Pin(filepath.Join(dir, "map_"+nm.name)); err != nil {
			undo()
			return fmt.Errorf("cgroupbpf: pin map %s: %w", nm.name, err)
		}
		pinned = append(pinned, nm.m)
	}
	p.pinDir = dir
	return nil
}

// Close detaches the programs, removes the pins (and the pin directory if
// then empty) and frees everything. Open EventReaders stop with ErrClosed.
func (p *Programs) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.closeAll()
}

func (p *Programs) closeAll() error {
	var errs []error
	if p.reader != nil {
		p.reader.r.Close()
		p.reader = nil
	}
	for i, l := range p.links {
		if l.IsPinned() {
			if err := l.Unpin(); err != nil {
				errs = append(errs, fmt.Errorf("unpin link %s: %w", p.progs[i].name, err))
			}
		}
		if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			errs = append(errs, fmt.Errorf("detach %s: %w", p.progs[i].name, err))
		}
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close link %s: %w", p.progs[i].name, err))
		}
	}
	for _, pr := range p.progs {
		pr.p.Close()
	}
	for _, nm := range p.maps {
		if nm.m.IsPinned() {
			if err := nm.m.Unpin(); err != nil {
				errs = append(errs, fmt.Errorf("unpin map %s: %w", nm.name, err))
			}
		}
		nm.m.Close()
	}
	if p.pinDir != "" {
		if err := os.Remove(p.pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove pin directory: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroupbpf: close: %w", err)
	}
	return nil
}

// RemovePinned removes what Pin left in dir (after a crash of the process
// that pinned it) and dir itself if it is then empty. Each pinned link is
// detached first, so that once RemovePinned returns no program is attached
// any more (removing a pin alone lets the kernel release the link later,
// from a work queue). A dir that does not exist is not an error.
func RemovePinned(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := checkBPFFS(dir); err != nil {
		return err
	}
	var errs []error
	for _, s := range programSpecs {
		path := filepath.Join(dir, s.name)
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// A link whose cgroup is gone is detached already; a failed
		// detach leaves the programs in place (fail closed) until the
		// kernel releases the link after the unpin below.
		l.Detach()
		if err := l.Unpin(); err != nil {
			errs = append(errs, err)
		}
		l.Close()
	}
	for _, n := range mapNames {
		if err := os.Remove(filepath.Join(dir, "map_"+n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroupbpf: remove pins: %w", err)
	}
	return nil
}
