package cgroupbpf

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	if spec := os.Getenv(loaderEnv); spec != "" {
		os.Exit(runLoader(spec))
	}
	if fifo := os.Getenv(holdEnv); fifo != "" {
		os.Exit(runHolder(fifo))
	}
	os.Exit(m.Run())
}

// runChild does the ops in childEnv and prints one result per op as JSON.
func runChild(spec string) int {
	var ops []op
	if err := json.Unmarshal([]byte(spec), &ops); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	res := make([]result, 0, len(ops))
	for _, o := range ops {
		r := childOp(o)
		r.PID = os.Getpid()
		res = append(res, r)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// failed is a step's error as a result.
func failed(step string, err error) result {
	var errno unix.Errno
	if errors.As(err, &errno) {
		name := unix.ErrnoName(errno)
		if name == "" {
			name = fmt.Sprintf("errno %d", int(errno))
		}
		return result{Errno: name, Step: step}
	}
	return result{Errno: err.Error(), Step: step}
}

func sockaddr(s string) (unix.Sockaddr, int) {
	a := netip.MustParseAddrPort(s)
	if a.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}, unix.AF_INET
	}
	return &unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16()}, unix.AF_INET6
}

func sockaddrAddr(s string) netip.Addr { return netip.MustParseAddrPort(s).Addr() }

func sockaddrString(sa unix.Sockaddr) string {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)).String()
	}
	return fmt.Sprint(sa)
}

// socket opens a socket with 10 s send and receive timeouts: a guard
// against a hang, not a measurement.
func socket(family, typ, proto int) (int, error) {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, err
	}
	tv := unix.Timeval{Sec: 10}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	return fd, nil
}

// exchange writes line and reads the answer on a connected socket.
func exchange(fd int, line string) (string, error) {
	if _, err := unix.Write(fd, []byte(line+"\n")); err != nil {
		return "", err
	}
	return readReply(fd)
}

func readReply(fd int) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

func childOp(o op) result {
	switch o.Kind {
	case "unshare-netns":
		// This thread (and so every later op: runChild runs them on the
		// main goroutine, locked to it from now on) moves to a new network
		// namespace, as a process already running in the sandbox would.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return failed("unshare", err)
		}
		return result{}

	case "lo-up":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return failed("ifreq", err)
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return failed("get flags", err)
		}
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
			return failed("set flags", err)
		}
		return result{}

	case "tcp", "mptcp", "bulk":
		sa, fam := sockaddr(o.Addr)
		proto := 0
		if o.Kind == "mptcp" {
			proto = unix.IPPROTO_MPTCP
		}
		fd, err := socket(fam, unix.SOCK_STREAM, proto)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa); err != nil {
			return failed("connect", err)
		}
		peer, err := unix.Getpeername(fd)
		if err != nil {
			return failed("getpeername", err)
		}
		line := o.Data
		if o.Kind == "bulk" {
			const size = 8 << 20
			line = "bulk " + strconv.Itoa(size)
			if _, err := unix.Write(fd, []byte(line+"\n")); err != nil {
				return failed("write", err)
			}
			chunk := make([]byte, 1<<20)
			for sent := 0; sent < size; sent += len(chunk) {
				if err := writeAll(fd, chunk); err != nil {
					return failed("write", err)
				}
			}
			reply, err := readReply(fd)
			if err != nil {
				return failed("read", err)
			}
			return result{Reply: reply, From: sockaddrString(peer)}
		}
		reply, err := exchange(fd, line)
		if err != nil {
			return failed("exchange", err)
		}
		return result{Reply: reply, From: sockaddrString(peer)}

	case "tfo":
		sa, fam := sockaddr(o.Addr)
		fd, err := socket(fam, unix.SOCK_STREAM, 0)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, []byte(o.Data+"\n"), unix.MSG_FASTOPEN, sa); err != nil {
			return failed("sendto", err)
		}
		reply, err := readReply(fd)
		if err != nil {
			return failed("read", err)
		}
		return result{Reply: reply}

	case "udp", "lsrr", "rthdr":
		sa, fam := sockaddr(o.Addr)
		fd, err := socket(fam, unix.SOCK_DGRAM, 0)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(fd)
		switch o.Kind {
		case "lsrr":
			// NOP, then loose source and record route through Via.
			hop := netip.MustParseAddr(o.Via).As4()
			opts := append([]byte{1, 131, 7, 4}, hop[:]...)
			if err := unix.SetsockoptString(fd, unix.IPPROTO_IP, unix.IP_OPTIONS, string(opts)); err != nil {
				return failed("IP_OPTIONS", err)
			}
		case "rthdr":
			// Segment routing header (type 4): the packet goes to Via
			// first, then to Addr.
			hop, dst := netip.MustParseAddr(o.Via).As16(), sockaddrAddr(o.Addr).As16()
			rh := append([]byte{0, 4, 4, 1, 1, 0, 0, 0}, dst[:]...)
			rh = append(rh, hop[:]...)
			if err := unix.SetsockoptString(fd, unix.IPPROTO_IPV6, unix.IPV6_RTHDR, string(rh)); err != nil {
				return failed("IPV6_RTHDR", err)
			}
		}
		if err := unix.Sendto(fd, []byte(o.Data), 0, sa); err != nil {
			return failed("sendto", err)
		}
		buf := make([]byte, 256)
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return failed("recvfrom", err)
		}
		return result{Reply: string(buf[:n]), From: sockaddrString(from)}

	case "udp-connect":
		sa, fam := sockaddr(o.Addr)
		fd, err := socket(fam, unix.SOCK_DGRAM, 0)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa); err != nil {
			return failed("connect", err)
		}
		if _, err := unix.Write(fd, []byte(o.Data)); err != nil {
			return failed("send", err)
		}
		reply, err := readReply(fd)
		if err != nil {
			return failed("recv", err)
		}
		peer, err := unix.Getpeername(fd)
		if err != nil {
			return failed("getpeername", err)
		}
		r := result{Reply: reply, From: sockaddrString(peer)}
		if o.Via != "" {
			via, _ := sockaddr(o.Via)
			if err := unix.Sendto(fd, []byte(o.Data), 0, via); err != nil {
				r.Errno, r.Step = unix.ErrnoName(err.(unix.Errno)), "sendto-via"
			}
		}
		return r

	case "raw-icmp":
		sa, fam := sockaddr(o.Addr)
		proto, typ := unix.IPPROTO_ICMP, byte(8) // echo request
		if fam == unix.AF_INET6 {
			proto, typ = unix.IPPROTO_ICMPV6, 128
			sa.(*unix.SockaddrInet6).Port = 0
		} else {
			sa.(*unix.SockaddrInet4).Port = 0
		}
		fd, err := socket(fam, unix.SOCK_RAW, proto)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(fd)
		msg := []byte{typ, 0, 0, 0, 0x12, 0x34, 0, 1}
		if fam == unix.AF_INET {
			sum := ^icmpSum(msg)
			msg[2], msg[3] = byte(sum>>8), byte(sum)
		}
		if err := unix.Sendto(fd, msg, 0, sa); err != nil {
			return failed("sendto", err)
		}
		return result{}

	case "echo-server":
		// TCP and UDP servers like tcpServer and udpServer, in this
		// process (and so in its network namespace), for the ops after.
		if err := childEchoServers(o.Addr); err != nil {
			return failed("listen", err)
		}
		return result{}

	case "listen-connect":
		// A server and a client of this process on Addr (port 0: any).
		sa, fam := sockaddr(o.Addr)
		l, err := socket(fam, unix.SOCK_STREAM, 0)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(l)
		if err := unix.Bind(l, sa); err != nil {
			return failed("bind", err)
		}
		if err := unix.Listen(l, 1); err != nil {
			return failed("listen", err)
		}
		bound, err := unix.Getsockname(l)
		if err != nil {
			return failed("getsockname", err)
		}
		c, err := socket(fam, unix.SOCK_STREAM, 0)
		if err != nil {
			return failed("socket", err)
		}
		defer unix.Close(c)
		if err := unix.Connect(c, bound); err != nil {
			return failed("connect", err)
		}
		return result{From: sockaddrString(bound)}
	}
	return result{Errno: "unknown op " + o.Kind}
}

func childEchoServers(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, err := bufio.NewReader(conn).ReadString('\n')
				if err == nil {
					conn.Write([]byte("ok:" + line))
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(append([]byte("ok:"), buf[:n]...), from)
		}
	}()
	return nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func icmpSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// The loader: a supervisor that attaches and pins, then dies without
// cleaning up.

const loaderEnv = "CAIRN_CGROUPBPF_LOADER"

type loaderSpec struct {
	Cgroup, PinDir string
	Allow          []string // netip.AddrPort: one TCP port of one address
}

func runLoader(spec string) int {
	var s loaderSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p, err := Load(Config{Mode: ModePolicy})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, a := range s.Allow {
		ap := netip.MustParseAddrPort(a)
		if err := p.Allow(Rule{Prefix: netip.PrefixFrom(ap.Addr(), ap.Addr().BitLen()), Ports: []PortRange{Port(ap.Port())}, Protocols: TCP}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if err := p.Attach(s.Cgroup); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := p.Pin(s.PinDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("pinned")
	return 0 // no Close: the pins keep the programs attached
}
