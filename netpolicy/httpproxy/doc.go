// Package httpproxy is the HTTP(S) forward proxy that enforces HTTP method
// rules of a sandbox's egress policy ("GET and HEAD only for
// api.example.org"). cairn runs one per sandbox on the host's loopback and
// points the sandbox at it with HTTP_PROXY and HTTPS_PROXY (Proxy.Env).
// It imports no cairn package: netpolicy passes the policy as plain data
// (Config) and decides, in BPF, that hosts with method rules are reached
// through the proxy or not at all (their addresses are not allowed
// directly; the proxy's address is).
//
// # Use
//
//	p, err := httpproxy.Start(httpproxy.Config{
//		Rules:   []httpproxy.HostRule{{Host: "api.example.org", Methods: []string{"GET", "HEAD"}}},
//		Allowed: policy.AllowsHost, // hosts without method rules
//	}, "127.0.0.1:0")
//	env = append(env, p.Env()...)
//	...
//	entries, dropped := p.TakeAudit() // per turn
//	p.Close()
//
// # Decisions
//
// Every request names its destination (host and port); the proxy decides
// before it resolves or dials anything:
//
//   - A host matching a HostRule (the most specific pattern: exact name,
//     then the longest "*.suffix") has method rules: a plain http:// request
//     is forwarded only if a rule for that pattern allows its method and
//     port, otherwise the client gets 403 with a body naming the rule.
//     Allowed is not asked about such hosts.
//   - Any other host is forwarded (http://) or tunnelled (CONNECT) without
//     method checks if Allowed(host, port) says so, and gets 403 otherwise.
//   - CONNECT to a host with method rules is denied (403) unless a CA is
//     configured: inside a TLS tunnel the proxy cannot see methods, so
//     without interception the rules cannot be enforced, and the proxy will
//     not pretend otherwise. The body says so and suggests http:// or a
//     sandbox CA (cairn run --http-intercept).
//   - The proxy's own address is always denied (no loops).
//
// Requests in origin form ("GET / HTTP/1.1" sent to the proxy as if it were
// the server) get 400. The request goes to the decided destination,
// normalized (lower case, no trailing dot), whatever the client spelled;
// hop-by-hop and Proxy-* headers are not forwarded; the client's Host
// header is kept.
//
// # Resolution and internal addresses
//
// The default dialer resolves an allowed name and, before connecting to
// each address, refuses loopback, private, link-local, CGNAT (100.64/10),
// multicast and unspecified addresses unless the policy allows them:
// Config.AllowInternal, asked with the name and the address (a name's rule
// may allow private answers), or without it Allowed for that address itself
// (Allowed("127.0.0.1", port)). So an allowed name that resolves to the
// host's loopback or to 169.254.169.254 (DNS rebinding) is denied, and
// the proxy is no open door to the host's loopback services. The
// proxy runs outside the sandbox's cgroup, so BPF does not police its own
// connections: this check does. A custom Config.Dial takes it over.
//
// # TLS interception
//
// Only with Config.CA, a per-sandbox CA the caller generates (NewCA, ECDSA
// P-256, valid CAValidity, path length 0, optionally name-constrained to
// the rule patterns) and installs in the sandbox's trust store. A CONNECT
// to a host with method rules is then answered 200 and the proxy
// terminates TLS with a leaf for the CONNECT host (cached, valid
// LeafValidity, never past the CA), offering only http/1.1 in ALPN (HTTP/2
// is never negotiated), reads HTTP/1.1 requests, denies those whose
// method is not allowed or whose Host names another host than the CONNECT
// target (domain fronting), and forwards the rest over a new TLS
// connection that verifies the real host's certificate against RootCAs
// (the system roots by default). A CONNECT to a host without method rules
// stays a blind tunnel even with a CA.
//
// The sandbox's trust store is TrustBundle(roots, certPEM): the host's
// roots (ReadRoots of SystemRootsFile, the file Go and OpenSSL read) and
// the CA, so that clients pointed at it (SSL_CERT_FILE and the like) trust
// both the intercepted hosts and the tunnelled ones. The CA's key stays
// with the proxy, in memory.
//
// # Limits
//
// Header size (MaxHeaderBytes; 431 beyond), header read and TLS handshake
// time (ReadHeaderTimeout), idle client connections, tunnels and
// intercepted connections (IdleTimeout: no byte either way), dial time
// (DialTimeout). Request and response bodies are streamed, not buffered.
// The proxy takes no credentials: any process that can reach its loopback
// port can use it, with this sandbox's policy.
//
// # Audit
//
// Each decision is counted per (host, port, method, kind, verdict), with
// the first and last time: Audit and TakeAudit. CONNECT is recorded as
// method CONNECT, kind tunnel or intercepted; requests read inside an
// intercepted connection are recorded each with kind intercepted. Bytes
// inside a blind tunnel are not seen. At most MaxAuditEntries distinct
// entries are kept per period; the rest are counted as dropped.
package httpproxy
