package cgroupbpf

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf/link"

	"github.com/cairnfs/cairn/netpolicy/internal/cgrouptest"
)

// The tests load real programs into the kernel and attach them to cgroups
// they create under this process's own cgroup2 cgroup; the workloads are
// re-executions of the test binary (TestMain: childEnv, loaderEnv) placed in
// those cgroups with CLONE_INTO_CGROUP. They talk to servers the test runs
// on loopback, and to addresses without routes, which the programs decide
// on before any routing.

// needBPF skips (fails in CI) unless the programs can load here: root, BPF,
// the hooks and a cgroup2 mount.
func needBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root (loads BPF programs, creates cgroups)")
	}
	if err := probe(); err != nil {
		skipOrFail(t, "BPF egress programs cannot load here: "+err.Error())
	}
	if _, err := ownCgroup2(); err != nil {
		skipOrFail(t, "no cgroup2: "+err.Error())
	}
}

func skipOrFail(t testing.TB, why string) { t.Helper(); cgrouptest.SkipOrFail(t, why) }

func ownCgroup2() (string, error) { return cgrouptest.Own() }

// newCgroup creates an empty cgroup2 directory under dir (this process's
// cgroup when dir is ""), removed at the end of the test.
func newCgroup(t testing.TB, dir string) string {
	t.Helper()
	return cgrouptest.New(t, dir, "cairn-cgroupbpf")
}

// attachedPrograms counts the programs attached to cgroup for each hook.
func attachedPrograms(t testing.TB, cgroup string) int {
	t.Helper()
	f, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, s := range programSpecs {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: s.attach})
		if err != nil {
			t.Fatalf("query %s programs: %v", s.name, err)
		}
		n += len(res.Programs)
	}
	return n
}

// load loads programs with cfg and rules, attaches them to cgroup, and
// closes them at the end of the test, checking that nothing stays attached.
func load(t testing.TB, cfg Config, cgroup string, rules ...Rule) *Programs {
	t.Helper()
	p, err := Load(cfg)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := attachedPrograms(t, cgroup); n != 0 {
			t.Errorf("%d programs still attached to %s after Close", n, cgroup)
		}
	})
	if err := p.Allow(rules...); err != nil {
		t.Fatalf("Allow: %v", err)
	}
	if err := p.Attach(cgroup); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return p
}

// Child workloads.

const childEnv = "CAIRN_CGROUPBPF_CHILD"

// op is one thing the child does.
type op struct {
	Kind string // see childOp
	Addr string // destination, netip.AddrPort syntax
	// Via: a second destination (udp-connect then sendto), or the hop of
	// a source route.
	Via  string `json:",omitempty"`
	Data string `json:",omitempty"`
}

// result is what the child saw. Errno is "" for success, else its name
// (EPERM...), of the first step that failed.
type result struct {
	Errno string
	Step  string `json:",omitempty"`
	Reply string `json:",omitempty"` // what came back
	From  string `json:",omitempty"` // recvfrom's source, or getpeername
	PID   int
}

// child runs ops in a child process in cgroup (and, with newNetns, in a
// new network namespace with lo up) and returns one result per op.
func child(t testing.TB, cgroup string, newNetns bool, ops ...op) []result {
	t.Helper()
	spec, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runInCgroup(t, cgroup, newNetns, childEnv+"="+string(spec))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var res []result
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(ops) {
		t.Fatalf("child output %q: %v", out, err)
	}
	return res
}

// runInCgroup re-executes the test binary in cgroup with env added, and
// returns its stdout.
func runInCgroup(t testing.TB, cgroup string, newNetns bool, env ...string) ([]byte, error) {
	t.Helper()
	return cgrouptest.Run(t, cgroup, newNetns, env...)
}

// Servers on loopback.

// tcpServer listens on addr (port 0: any) and answers each connection's
// first line with "ok:" and the line; for "bulk N" it first reads N more
// bytes. It serves until the test ends, and returns its address.
func tcpServer(t testing.TB, addr string) netip.AddrPort {
	t.Helper()
	return cgrouptest.TCPServer(t, addr)
}

// udpServer answers each datagram with "ok:" and its payload, and counts
// them.
type udpServer struct {
	addr netip.AddrPort
	got  atomic.Int64
}

func newUDPServer(t testing.TB, addr string) *udpServer {
	t.Helper()
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &udpServer{addr: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			s.got.Add(1)
			c.WriteTo(append([]byte("ok:"), buf[:n]...), from)
		}
	}()
	return s
}

func ap(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

var (
	lo4  = netip.MustParseAddr("127.0.0.1")
	lo4b = netip.MustParseAddr("127.0.0.2")
	lo6  = netip.IPv6Loopback()
)

func mapped(a netip.Addr) netip.Addr { return netip.AddrFrom16(a.As16()) }

// dnsForwarder starts a TCP and a UDP server (tcpServer, udpServer) on the
// same port of host, as a DNS forwarder listens.
func dnsForwarder(t testing.TB, host string) *udpServer {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		c, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		l.Close()
		if err != nil {
			continue // the UDP port is taken: another one
		}
		c.Close()
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		tcpServer(t, addr)
		return newUDPServer(t, addr)
	}
	t.Fatal("no port free for both TCP and UDP")
	return nil
}
