// Package cgroupbpf is the kernel half of cairn's egress policy: eBPF
// programs on a sandbox's cgroup2 directory that decide every connection
// and datagram its sockets start, and the Go API that loads, feeds, pins
// and audits them. It imports no cairn package; netpolicy builds the
// policy (flags, files, the DNS forwarder) on top of it.
//
// The programs are written with cilium/ebpf's asm package (asm_linux.go):
// building needs no C compiler and there are no generated objects.
//
// # Use
//
//	p, err := cgroupbpf.Load(cgroupbpf.Config{Mode: cgroupbpf.ModePolicy, DNS: fwd})
//	p.Allow(cgroupbpf.Rule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: []cgroupbpf.PortRange{cgroupbpf.Port(443)}})
//	p.Attach(cgroupDir)           // before the workload starts
//	cgroupbpf.MountBPFFS(bpffs)   // once
//	p.Pin(filepath.Join(bpffs, id))
//	events, _ := p.Events()       // denials, and each destination's first decision
//	...                           // the forwarder calls p.AllowAddr(ip, ports, protos, ttl)
//	dests, _ := p.Destinations()  // per-destination counts for the turn's record
//	p.Close()                     // detach, unpin, free
//
// # Programs
//
// Nine programs, attached with bpf_link (so they also apply to every cgroup
// below, whatever programs those get; a descendant cannot override them,
// and the sandbox cannot attach anything: seccomp denies bpf()):
//
//   - cgroup/connect4, connect6: connect() of TCP and UDP sockets, and TCP
//     Fast Open (sendto with MSG_FASTOPEN goes through connect4/6).
//     connect6 sees IPv4-mapped destinations (::ffff:a.b.c.d) and decides
//     them with the IPv4 rules.
//   - cgroup/sendmsg4, sendmsg6: UDP sendto/sendmsg with an address,
//     connected socket or not. A send() without an address on a connected
//     socket is not decided again (connect was). The kernel turns a
//     v4-mapped sendto on an AF_INET6 socket into an IPv4 one: sendmsg4
//     decides it.
//   - cgroup/recvmsg4, recvmsg6, getpeername4, getpeername6: the DNS
//     redirect's return path (below).
//   - cgroup_skb/egress, the backstop: every packet of the cgroup's
//     sockets passes only if it comes from a TCP (SOCK_STREAM) or UDP
//     (SOCK_DGRAM) socket, whose destinations the hooks above decided, and
//     its IP header cannot send it elsewhere: IPv4 without options (loose
//     source routing), IPv6 with the socket's protocol as next header, a
//     fragment header, or the jumbo hop-by-hop header the kernel itself
//     adds to TCP GSO packets over 64 KiB (on lo too); a routing header
//     (segment routing can be set by any user with IPV6_RTHDR) is dropped.
//     Raw sockets (ICMP, hand-made TCP), SCTP, ping sockets and the rest
//     are dropped; the sender gets EPERM. A TCP SYN dropped here is
//     retransmitted until connect times out: only traffic that the hooks
//     above did not stop meets the backstop.
//
// A denied connect or sendmsg fails at once with EPERM: the program runs
// before routing, so nothing leaves and nothing hangs.
//
// # Decision
//
// For a TCP or UDP destination address and port, in order:
//
//  1. Port 53 with a forwarder configured (Config.DNS for IPv4 and
//     v4-mapped, DNS6 for IPv6): redirected (below).
//  2. ModeUnrestricted: allowed.
//  3. A loopback destination (127.0.0.0/8, ::1, v4-mapped loopback, and
//     0.0.0.0 and ::, which reach the local host): allowed if the socket is
//     in another network namespace than the host's (the sandbox's own
//     loopback; the host's is the one Load ran in), or with
//     AllowHostLoopback. Otherwise the rules decide, like any address.
//  4. ModeDenyAll: denied.
//  5. The forwarder's own address and port: allowed.
//  6. The rule trie of the family (LPM): the longest prefix holding the
//     destination, whose entry carries its own port ranges and those of
//     every shorter rule prefix containing it (up to MaxPortRanges
//     (range, protocols) pairs per prefix).
//  7. The dynamic address map (AllowAddr, exact addresses from DNS
//     answers), whose entries expire on CLOCK_BOOTTIME.
//  8. Denied.
//
// Other protocols (ICMP, SCTP...) are never allowed outside
// ModeUnrestricted and the sandbox's own loopback.
//
// # DNS redirect
//
// A TCP or UDP connect or sendmsg to port 53 of any address goes to the
// forwarder instead; the original destination is kept in the socket's
// local storage (BPF_MAP_TYPE_SK_STORAGE, freed with the socket).
// recvmsg4/6 (UDP answers) and getpeername4/6 (TCP, connected UDP) show
// the original server as the peer of datagrams and sockets whose peer is
// the forwarder, so resolvers accept the answer. One original per socket:
// a resolver that sends one socket's queries to several servers sees every
// answer from the last one. Native IPv6 queries can only go to an IPv6
// forwarder (DNS6): the kernel refuses a sendmsg6 rewrite to a v4-mapped
// address (ENOTSUPP), so without DNS6 they are policed like the rest.
//
// # Audit
//
// Every decision is counted per (destination, protocol, verdict) in a hash
// map: Destinations returns the counts, the first and the latest time.
// The ring buffer (Events) carries every denial and the first decision for
// each new counter, with the PID and TID (initial PID namespace), the
// cgroup ID, the hook, the protocol and the destination. A full ring
// buffer or counter map never changes a verdict; losses are counted in
// Stats.
//
// # Lifetime and failing closed
//
// Attach links the programs to the cgroup; Pin pins the links and the maps
// in a bpffs (MountBPFFS), after which they stay attached when the
// supervisor exits or crashes, until the pins are removed (Close, or
// RemovePinned or RemoveDead by the next supervisor) or the cgroup is.
// Unpinning alone lets the kernel release a link asynchronously; Close,
// RemovePinned and RemoveDead detach explicitly, so no program is attached
// once they return. Load and Attach fail with errors wrapping
// ErrNotSupported when the kernel lacks anything the programs need (probed
// first); they never attach a subset. Sockets belong to the cgroup of the
// task that created them, so attach before the workload starts.
//
// # Cleaning up after a crash
//
// RemoveDead is RemovePinned for pins whose owner is known to be dead but
// whose cgroup may not be: it finds the cgroups the pinned links are
// attached to (by the cgroup ID in the link's info, opened with
// open_by_handle_at on the cgroup2 mount), and if one of them still holds
// a process (cgroup.events: populated) it leaves everything attached and
// returns an error wrapping ErrInUse. Otherwise it removes the pins and
// returns those cgroups, now free of the programs, for their owner to
// remove:
//
//	cgs, err := cgroupbpf.RemoveDead(filepath.Join(bpffs, id))
//	if errors.Is(err, cgroupbpf.ErrInUse) { ... } // kill the cgroup's processes first
//	for _, cg := range cgs { unix.Rmdir(cg) }
//
// # What the programs do not stop
//
// The caller must close these by other means (seccomp, capabilities):
//   - AF_PACKET sockets: their frames never pass the cgroup egress hook.
//     Creating them needs CAP_NET_RAW over the network namespace.
//   - Tunnel devices (vxlan, ipip, gre, wireguard...): the inner packet is
//     decided, the encapsulated one is sent by the kernel without the hook,
//     to the tunnel's remote. Creating them needs CAP_NET_ADMIN over the
//     network namespace. A sandbox whose user namespace owns its network
//     namespace has both capabilities there.
//   - Sockets created outside the cgroup and passed in (inherited file
//     descriptors, SCM_RIGHTS): the policy follows the socket's cgroup.
//   - Inbound connections: a server in the sandbox answers whoever reaches
//     it; only its UDP replies to unconnected peers are decided.
//
// # Requirements
//
// Linux with cgroup2, BPF ring buffers, socket storage, bpf_link for
// cgroups, the getpeername hooks, bpf_get_netns_cookie in cgroup_skb
// programs and SO_NETNS_COOKIE (Load probes each); CAP_BPF and
// CAP_NET_ADMIN (root). Elsewhere every function returns ErrNotSupported.
package cgroupbpf
