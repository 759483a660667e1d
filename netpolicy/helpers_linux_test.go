package netpolicy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/netpolicy/internal/cgrouptest"
)

// The session tests run the real programs on a cgroup they create under
// this process's cgroup2 cgroup, with workloads that are re-executions of
// the test binary (TestMain, childEnv) placed in it with CLONE_INTO_CGROUP.
// They only ever talk to loopback addresses (servers the test runs on
// 127.0.0.0/8 and the fake upstream DNS server); the DNS queries go to
// 127.0.0.53:53 and [::1]:53, which the programs redirect to the forwarder.

const childEnv = "CAIRN_NETPOLICY_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

func skipOrFail(t testing.TB, why string) { t.Helper(); cgrouptest.SkipOrFail(t, why) }

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root (loads BPF programs, creates cgroups)")
	}
}

// newCgroup creates a cgroup2 directory, removed at the end of the test.
func newCgroup(t testing.TB) string {
	t.Helper()
	return cgrouptest.New(t, "", "cairn-netpolicy")
}

// bpffsDir is a fresh directory for Config.BPFFS, unmounted at the end.
func bpffsDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bpffs")
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// tcpEcho listens on addr and answers each connection's first line with
// "ok:" and the line, until the test ends.
func tcpEcho(t testing.TB, addr string) netip.AddrPort {
	t.Helper()
	return cgrouptest.TCPServer(t, addr)
}

// op is one thing the child does.
type op struct {
	Kind   string // dns-udp, dns-tcp: query Name at Server; connect: TCP to Addr
	Name   string `json:",omitempty"`
	Server string `json:",omitempty"`
	Addr   string `json:",omitempty"`
}

// result is what the child saw.
type result struct {
	Err     string   // "" ok, an errno name (EPERM), or a message
	Rcode   string   `json:",omitempty"`
	Answers []string `json:",omitempty"`
	From    string   `json:",omitempty"` // the UDP answer's source
	Reply   string   `json:",omitempty"`
}

// child runs ops in a child process in cgroup, one result per op.
func child(t testing.TB, cgroup string, ops ...op) []result {
	t.Helper()
	return runOps(t, cgroup, false, ops)
}

// childNetns is child in a new network namespace without routes (its lo
// is down): only for destinations outside loopback, which the programs
// decide before routing and which can never leave that namespace.
func childNetns(t testing.TB, cgroup string, ops ...op) []result {
	t.Helper()
	return runOps(t, cgroup, true, ops)
}

func runOps(t testing.TB, cgroup string, newNetns bool, ops []op) []result {
	t.Helper()
	spec, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cgrouptest.Run(t, cgroup, newNetns, childEnv+"="+string(spec))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var res []result
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(ops) {
		t.Fatalf("child output %q: %v", out, err)
	}
	return res
}

func runChild(spec string) int {
	var ops []op
	if err := json.Unmarshal([]byte(spec), &ops); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var res []result
	for _, o := range ops {
		res = append(res, childOp(o))
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

func errResult(err error) result {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return result{Err: unix.ErrnoName(errno)}
	}
	return result{Err: err.Error()}
}

func childOp(o op) result {
	deadline := time.Now().Add(10 * time.Second)
	switch o.Kind {
	case "dns-udp":
		// Unconnected: sendto and recvfrom, so the source of the answer
		// is what recvmsg4/6 show.
		server := netip.MustParseAddrPort(o.Server)
		network := "udp4"
		if server.Addr().Is6() {
			network = "udp6"
		}
		c, err := net.ListenUDP(network, nil)
		if err != nil {
			return errResult(err)
		}
		defer c.Close()
		q := new(dns.Msg)
		q.SetQuestion(o.Name, dns.TypeA)
		wire, _ := q.Pack()
		c.SetDeadline(deadline)
		if _, err := c.WriteToUDPAddrPort(wire, server); err != nil {
			return errResult(err)
		}
		buf := make([]byte, 1500)
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return errResult(err)
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:n]); err != nil {
			return errResult(err)
		}
		res := dnsResult(r)
		res.From = netip.AddrPortFrom(from.Addr().Unmap(), from.Port()).String()
		return res
	case "dns-tcp":
		q := new(dns.Msg)
		q.SetQuestion(o.Name, dns.TypeA)
		r, _, err := (&dns.Client{Net: "tcp", Timeout: 10 * time.Second}).Exchange(q, o.Server)
		if err != nil {
			return errResult(err)
		}
		return dnsResult(r)
	case "connect":
		c, err := net.DialTimeout("tcp", o.Addr, 10*time.Second)
		if err != nil {
			return errResult(err)
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return errResult(err)
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return errResult(err)
		}
		return result{Reply: strings.TrimSpace(line)}
	}
	return result{Err: "unknown op " + o.Kind}
}

func dnsResult(r *dns.Msg) result {
	res := result{Rcode: dns.RcodeToString[r.Rcode]}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			res.Answers = append(res.Answers, a.A.String())
		}
	}
	return res
}
