// Package netpolicy is cairn's egress policy for one sandbox: the policy
// model (flags and files), the DNS forwarder that turns host name rules into
// addresses, and the Session that puts both and the kernel programs of
// netpolicy/cgroupbpf on the sandbox's cgroup, and reports the run's egress
// log. It imports no cairn package but its own subpackages.
//
// # Modes
//
//   - none (--net none, the zero value): no network. The sandbox gets its
//     own network namespace with only loopback; the sandbox package does
//     that, netpolicy does nothing (no programs, no forwarder).
//   - policy: default deny. The sandbox shares the host's network
//     namespace and its cgroup gets the programs: only what a rule allows
//     gets out, and DNS goes through the forwarder. The host's loopback
//     services are out of reach unless a rule allows them.
//   - unrestricted (--net unrestricted, explicit; the caller logs it):
//     everything gets out. The programs are still attached in audit mode
//     where BPF is available, so the turn's record says what was contacted;
//     without BPF the run is unaudited (Audit.Audited false) rather than
//     refused, since nothing was asked to be enforced.
//
// # Rules
//
// Flags (ParseMode, ParseAllow, ParseAllowHost, ParseHTTPMethods), then
// Policy.Validate:
//
//	--allow CIDR[:PORTS]       10.0.0.0/8  1.2.3.4:443  192.168.1.0/24:80,443
//	                           10.0.0.0/8:53/udp  2001:db8::/32  ::1
//	                           [2001:db8::/32]:80-90   (IPv6 with ports: brackets)
//	--allow-host NAME[:PORTS]  api.github.com:443  *.example.org  ntp.example.org:123/udp
//	--http-methods HOST=M,...  api.github.com=GET,HEAD
//	--net-policy FILE          the same in YAML or JSON (ParsePolicy)
//
// PORTS is "*" or a comma list of ports and ranges (443, 80,443,
// 8000-9000), optionally followed by /tcp or /udp; without ports every port
// is allowed, without a protocol both TCP and UDP. An address without a
// length is a /32 or /128; host bits must be zero (10.0.0.1/8 is an error
// that suggests 10.0.0.0/8). An unbracketed IPv6 value never has ports.
//
// A NAME is a DNS name (case-insensitive, trailing dot optional) or a
// wildcard "*.SUFFIX" (only as the whole leftmost label) that matches every
// name below SUFFIX at any depth but not SUFFIX itself: *.example.org
// allows a.example.org and a.b.example.org, not example.org (add a rule
// for it). Wildcards over a single label (*.com) are refused. A name
// allowed by several rules gets the ports of all of them.
//
// HTTP method rules (Policy.HTTP) restrict hosts that an allow-host rule
// already allows (Validate checks it); the HTTP proxy of
// netpolicy/httpproxy enforces them. Methods are GET, HEAD, POST, PUT,
// PATCH, DELETE, OPTIONS and TRACE.
//
// HostRule.AllowPrivate (allowPrivateAnswers in a file; a flag of the
// caller's choosing) keeps a name's answers in private ranges (below).
//
// # Policy files
//
// YAML or JSON (JSON when the name ends in .json or the text starts with
// '{'), decoded strictly with line numbers: unknown or repeated fields and
// values of the wrong kind are errors. Rules are written as in the flags or
// as objects:
//
//	mode: policy                    # none, policy, unrestricted; default policy
//	allow:
//	  - 10.0.0.0/8:443
//	  - cidr: 2001:db8::/32
//	    ports: [80, "8000-9000"]
//	    protocol: tcp
//	allowHosts:
//	  - api.github.com:443
//	  - name: "*.corp.example"
//	    ports: 443
//	    allowPrivateAnswers: true
//	http:
//	  - host: api.github.com
//	    methods: [GET, HEAD]
//
// # DNS
//
// In policy mode every TCP and UDP packet to port 53 of any address goes to
// the forwarder (127.0.0.1 and ::1, a random port; the programs redirect
// and make answers seem to come from the server asked). The forwarder runs
// in the supervisor, outside the sandbox's cgroup, and forwards to the
// upstream resolvers (Config.Upstreams, default /etc/resolv.conf's, which
// may be 127.0.0.53). For each query:
//
//   - A name no allow-host rule matches gets REFUSED at once and is never
//     sent upstream (no leak through queries). So do non-IN classes;
//     ANY, AXFR and IXFR get NOTIMP.
//   - An allowed name is answered from a small positive cache (TTLs
//     honoured, one hour at most) or asked upstream (UDP, TCP on
//     truncation, upstreams in order; all failing: SERVFAIL).
//   - The answer keeps the CNAME chain from the name asked and the records
//     of the asked type at its names; records of other names, RRSIGs and the
//     additional section (glue) go, the authority section keeps SOA only.
//     The chain's final addresses are allowed under the rules of the name
//     asked.
//   - A and AAAA answers in private or special ranges (IsSpecialAddr:
//     RFC 1918, CGNAT 100.64/10, loopback, link-local incl.
//     169.254.169.254, ULA fc00::/7, unspecified, multicast, reserved,
//     and NAT64/6to4 addresses embedding those) are stripped unless a
//     matching rule has AllowPrivate: DNS rebinding. A and AAAA records in
//     answers to other types are dropped too.
//   - Before the reply is sent, every remaining address is put in the BPF
//     maps (AddrAllower) with the rule's ports and protocols for
//     max(answer TTL, MinTTL), MinTTL 30 s by default, so a client that
//     connects right after resolving (or a little after the TTL) gets
//     through. A cached answer never outlives the map entries made when it
//     was fetched. If the maps refuse an address, the reply is SERVFAIL.
//   - Other types of an allowed name (TXT, MX, SRV...) are forwarded as
//     they come. SVCB and HTTPS records are kept but lose their ipv4hint
//     and ipv6hint parameters: clients then resolve A/AAAA, which go
//     through the maps.
//   - UDP replies respect the client's EDNS size (512 bytes without EDNS),
//     with TC set when cut, so clients retry over TCP.
//
// Every query is counted per (name, type, outcome, rcode) with the
// addresses answered and stripped (Forwarder.Log, Audit.DNS). Queries
// for cached and refused names are answered at well over 20,000 per second
// on loopback (BenchmarkForwarder).
//
// # Session and audit
//
// Start (before the workload starts) loads the programs with the
// forwarder's addresses, installs the --allow rules, attaches them to the
// sandbox's cgroup and pins them under a bpffs (Config.BPFFS) so that a
// supervisor crash leaves the sandbox denied. If BPF or cgroup2 is missing
// in policy mode, Start fails with an error wrapping ErrNotSupported: the
// caller must not run the sandbox. Audit returns the run's egress log:
// every destination tried, per (address, port, protocol, verdict) with
// counts and the names the forwarder resolved to that address, the DNS
// queries, and the first denials with their PIDs. Close (after the
// workload exited) records the final audit, detaches, unpins and stops the
// forwarder.
//
// # What is not covered
//
//   - AF_PACKET sockets and tunnel devices bypass the cgroup hooks; they
//     need CAP_NET_RAW and CAP_NET_ADMIN, which the sandbox drops.
//   - Sockets created outside the cgroup and passed in (inherited file
//     descriptors, SCM_RIGHTS) follow their own cgroup: not policed.
//   - Inbound connections to a server in the sandbox.
//   - An allowed address serves whatever names it hosts: a CDN address
//     allowed for one name is reachable for every site on it (HTTP Host
//     and TLS SNI are not checked, except by the HTTP proxy for hosts with
//     method rules).
//   - DNS over HTTPS or TLS to an allowed address bypasses the forwarder
//     (but only reaches addresses already allowed).
package netpolicy
