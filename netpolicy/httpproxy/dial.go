package httpproxy

import (
	"context"
	"net"
	"net/netip"
	"syscall"
)

// cgnat is the shared address space of RFC 6598, where some clouds keep
// their metadata services.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// thisNetwork is 0.0.0.0/8, which reaches the local host on Linux.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// internal reports whether a is an address a name should not lead to
// unless the policy allows the address itself: loopback, private,
// link-local, CGNAT, multicast, unspecified.
func internal(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() ||
		cgnat.Contains(a) || thisNetwork.Contains(a)
}

// defaultDial resolves and connects like net.Dialer, refusing, after
// resolution and before connecting, the internal addresses that the policy
// does not allow (AllowInternal, else Allowed by address), and the proxy's
// own address.
func (p *Proxy) defaultDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	host = normalizeHost(host)
	d := net.Dialer{
		Timeout:  p.cfg.DialTimeout,
		Resolver: p.cfg.Resolver,
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			return p.checkAddr(host, address)
		},
	}
	return d.DialContext(ctx, network, addr)
}

// checkAddr decides a resolved address ("ip:port") of host.
func (p *Proxy) checkAddr(host, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DeniedError{Host: address, Reason: "not an IP address and port"}
	}
	a := ap.Addr().Unmap().WithZone("")
	if p.isSelf(a, ap.Port()) {
		return &DeniedError{Host: a.String(), Port: ap.Port(), Reason: "that is the proxy itself"}
	}
	if internal(a) && !p.allowInternal(host, a, ap.Port()) {
		return &DeniedError{Host: a.String(), Port: ap.Port(),
			Reason: "a loopback, private, link-local or otherwise internal address that the policy does not allow"}
	}
	return nil
}

// isSelf reports whether a:port is (or may be) the proxy's listener.
func (p *Proxy) isSelf(a netip.Addr, port uint16) bool {
	p.mu.Lock()
	ln := p.ln
	p.mu.Unlock()
	if ln == nil {
		return false
	}
	self, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil || self.Port() != port {
		return false
	}
	s := self.Addr().Unmap().WithZone("")
	return s == a || s.IsUnspecified() && internal(a) || a.IsUnspecified() || s.IsLoopback() && a.IsLoopback()
}

// allowInternal decides an internal address a that host resolved to.
func (p *Proxy) allowInternal(host string, a netip.Addr, port uint16) bool {
	if p.cfg.AllowInternal != nil {
		return p.cfg.AllowInternal(host, a, port)
	}
	return p.cfg.Allowed != nil && p.cfg.Allowed(a.String(), port)
}
