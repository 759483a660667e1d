//go:build linux

package main

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// connectUnix connects to a unix socket (name "@x" is abstract) with each
// socket type until one is not EPROTOTYPE.
func connectUnix(name string) error {
	var err error
	for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_SEQPACKET, unix.SOCK_DGRAM} {
		var fd int
		fd, err = unix.Socket(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: name})
		unix.Close(fd)
		if err != unix.EPROTOTYPE {
			return err
		}
	}
	return err
}

// reached classifies a connection: success, or EPROTOTYPE (the socket
// exists with another type), is ESCAPED; any other error is BLOCKED.
func reached(name string, err error) attempt {
	if err == nil {
		return attempt{name, Escaped, "connected"}
	}
	if errors.Is(err, unix.EPROTOTYPE) {
		return attempt{name, Escaped, "exists(EPROTOTYPE)"}
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return attempt{name, Blocked, errnoName(e)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return attempt{name, Blocked, "timeout"}
	}
	return attempt{name, Blocked, token(err.Error())}
}

// checkAbstract connects to the host's abstract unix socket -abstract
// (abstract sockets belong to the network namespace).
func checkAbstract(o *options) []attempt {
	name := "@" + strings.TrimPrefix(o.abstract, "@")
	return []attempt{reached(name, connectUnix(name))}
}

// checkUnix connects to the host's pathname unix socket -unix.
func checkUnix(o *options) []attempt {
	return []attempt{reached(o.unixPath, connectUnix(o.unixPath))}
}

// checkHostNet connects to 127.0.0.1:-host-port, where the host listens:
// the sandbox's loopback is its own.
func checkHostNet(o *options) []attempt {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(o.hostPort))
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err == nil {
		c.Close()
	}
	return []attempt{reached(addr, err)}
}
