package httpproxy

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

var (
	// ErrInvalid: a Config, HostRule or CA is malformed (a host pattern with
	// a wildcard anywhere but the first label, a port 0, a method that is
	// not an HTTP token, a CA certificate that is not a CA).
	ErrInvalid = errors.New("invalid HTTP proxy configuration")
	// ErrDenied: the policy does not allow a request, a tunnel, or the
	// address a name resolved to. Errors of type *DeniedError match it.
	ErrDenied = errors.New("denied by egress policy")
	// ErrClosed: the Proxy was used after Close, or served twice.
	ErrClosed = errors.New("HTTP proxy closed")
)

// DeniedError says which destination the policy refused and why. It
// matches ErrDenied through errors.Is.
type DeniedError struct {
	// Host is the destination host name or IP literal, lower case.
	Host string
	// Port is the destination port.
	Port uint16
	// Method is the HTTP method, or CONNECT for a tunnel; empty for an
	// address refused at dial time.
	Method string
	// Reason is a sentence for people: which rule decided, what to do.
	Reason string
}

func (e *DeniedError) Error() string {
	dst := hostPort(e.Host, e.Port)
	if e.Method == "" {
		return fmt.Sprintf("%s denied by egress policy: %s", dst, e.Reason)
	}
	return fmt.Sprintf("%s to %s denied by egress policy: %s", e.Method, dst, e.Reason)
}

// Is reports whether target is ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

func hostPort(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
