package integration

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The egress bypass battery of issue 8, through the binary: what a workload
// in `cairn run` can try to get past the egress policy, each probe a line
// "name result" printed by a Python script in the sandbox (the system's
// /usr/bin/python3: the sandbox's root is the host's /). Every server is on
// loopback; DNS queries go to the sandbox's /etc/resolv.conf nameserver,
// port 53, which the programs redirect to cairn's forwarder, which asks the
// fake upstream below.

// dnsUpstream is a DNS server on loopback, over UDP and TCP on one port,
// answering an A record (TTL 60) for each name of answers and nothing for
// other names. It returns its address.
func dnsUpstream(t *testing.T, answers map[string]string) string {
	t.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.ToLower(q.Question[0].Name)
		if ip := answers[strings.TrimSuffix(name, ".")]; ip != "" && q.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(fmt.Sprintf("%s 60 IN A %s", name, ip))
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			l.Close() // that UDP port is taken: another one
			continue
		}
		for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: l, Handler: handler}} {
			go srv.ActivateAndServe()
			t.Cleanup(func() { srv.Shutdown() })
		}
		return addr
	}
	t.Fatal("no loopback port free for both TCP and UDP")
	return ""
}

// probeServer counts what reaches one loopback address: TCP connections
// (each answered "ok:LINE" for its first line) or UDP datagrams, and the
// lines or payloads received.
type probeServer struct {
	mu      sync.Mutex
	accepts int
	got     []string
}

func (s *probeServer) record(accepted bool, data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if accepted {
		s.accepts++
	}
	if data != "" {
		s.got = append(s.got, data)
	}
}

func (s *probeServer) snapshot() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepts, slices.Clone(s.got)
}

// onSamePort opens a socket with open on one free port of every host,
// trying other ports while something else holds the first one's port on
// another host.
func onSamePort[T io.Closer](t *testing.T, hosts []string, open func(addr string) (T, int, error)) (int, []T) {
	t.Helper()
	for range 20 {
		var socks []T
		port := 0
		for _, h := range hosts {
			s, p, err := open(net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				break
			}
			socks, port = append(socks, s), p
		}
		if len(socks) == len(hosts) {
			return port, socks
		}
		for _, s := range socks {
			s.Close()
		}
	}
	t.Fatalf("no port free on all of %v", hosts)
	return 0, nil
}

// tcpServers listens on the same free port of each host and serves until
// the test ends.
func tcpServers(t *testing.T, hosts ...string) (int, []*probeServer) {
	t.Helper()
	port, ls := onSamePort(t, hosts, func(addr string) (net.Listener, int, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, 0, err
		}
		return l, l.Addr().(*net.TCPAddr).Port, nil
	})
	var servers []*probeServer
	for _, l := range ls {
		s := &probeServer{}
		servers = append(servers, s)
		var wg sync.WaitGroup
		t.Cleanup(func() { l.Close(); wg.Wait() })
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				s.record(true, "")
				wg.Go(func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(30 * time.Second))
					line, err := bufio.NewReader(c).ReadString('\n')
					if err == nil {
						s.record(false, strings.TrimSpace(line))
						c.Write([]byte("ok:" + line))
					}
				})
			}
		})
	}
	return port, servers
}

// udpServers binds the same free UDP port on each host and records the
// datagrams until the test ends.
func udpServers(t *testing.T, hosts ...string) (int, []*probeServer) {
	t.Helper()
	port, cs := onSamePort(t, hosts, func(addr string) (net.PacketConn, int, error) {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, 0, err
		}
		return c, c.LocalAddr().(*net.UDPAddr).Port, nil
	})
	var servers []*probeServer
	for _, c := range cs {
		s := &probeServer{}
		servers = append(servers, s)
		done := make(chan struct{})
		t.Cleanup(func() { c.Close(); <-done })
		go func() {
			defer close(done)
			buf := make([]byte, 2048)
			for {
				n, _, err := c.ReadFrom(buf)
				if err != nil {
					return
				}
				s.record(false, string(buf[:n]))
			}
		}()
	}
	return port, servers
}

// probeLib is the Python the probes share. err gives an errno name (EPERM)
// or, without one, the exception's type (TimeoutError: a probe that hung).
const probeLib = `
import ctypes, errno, fcntl, json, os, random, socket, struct, sys
cfg = json.loads(sys.argv[1])
P, P6A, P6B, U = cfg["p"], cfg["p6a"], cfg["p6b"], cfg["u"]
INET, INET6 = socket.AF_INET, socket.AF_INET6
MSG_FASTOPEN = 0x20000000

def err(e):
    return errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__

def recvn(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("short read")
        b += c
    return b

def reply(s, tag):
    want = b"ok:" + tag.encode() + b"\n"
    got = recvn(s, len(want))
    return "ok" if got == want else "reply:" + repr(got)

def tcp(family, host, port, tag):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
        s.sendall(tag.encode() + b"\n")
        return reply(s, tag)
    except (OSError, EOFError) as e:
        return err(e) if isinstance(e, OSError) else "EOF"
    finally:
        s.close()

# A blocking socket (with a timeout, Python's sockets are non-blocking and
# a first sendto(MSG_FASTOPEN) without a cookie gives EINPROGRESS) whose
# kernel send timeout bounds the connect.
def tfo(host, port, tag):
    s = socket.socket(INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 5, 0))
    try:
        s.sendto(tag.encode() + b"\n", MSG_FASTOPEN, (host, port))
        s.settimeout(5)
        return reply(s, tag)
    except (OSError, EOFError) as e:
        return err(e) if isinstance(e, OSError) else "EOF"
    finally:
        s.close()

def udp_sendto(family, host, port, tag):
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        s.sendto(tag.encode(), (host, port))
        return "ok"
    except OSError as e:
        return err(e)
    finally:
        s.close()

def udp_connect(host, port, tag):
    s = socket.socket(INET, socket.SOCK_DGRAM)
    try:
        s.connect((host, port))
        s.send(tag.encode())
        return "ok"
    except OSError as e:
        return err(e)
    finally:
        s.close()

def nameserver():
    for line in open("/etc/resolv.conf"):
        f = line.split()
        if len(f) >= 2 and f[0] == "nameserver":
            return f[1]
NS = nameserver()
NSFAM = INET6 if ":" in NS else INET
RCODES = ["NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"]

def query(name, qid):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack("!HH", 1, 1)

def skipname(m, i):
    while True:
        n = m[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += 1 + n

def answer(m, qid):
    rid, flags, qd, an, _, _ = struct.unpack("!HHHHHH", m[:12])
    if rid != qid:
        return "wrong-id"
    rcode = flags & 15
    out = RCODES[rcode] if rcode < len(RCODES) else "RCODE%d" % rcode
    i = 12
    for _ in range(qd):
        i = skipname(m, i) + 4
    addrs = []
    for _ in range(an):
        i = skipname(m, i)
        typ, _, _, rdlen = struct.unpack("!HHIH", m[i:i + 10])
        i += 10
        if typ == 1 and rdlen == 4:
            addrs.append(socket.inet_ntoa(m[i:i + 4]))
        i += rdlen
    return out + " " + (",".join(addrs) or "-")

# dns_udp and dns_tcp ask NS:53 by hand (no resolver library) and check
# that the answer seems to come from NS:53, as the redirect promises.
def dns_udp(name):
    qid = random.randrange(1 << 16)
    s = socket.socket(NSFAM, socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        s.sendto(query(name, qid), (NS, 53))
        m, frm = s.recvfrom(4096)
        if frm[:2] != (NS, 53):
            return "from:%s:%d" % frm[:2]
        return answer(m, qid)
    except OSError as e:
        return err(e)
    finally:
        s.close()

def dns_tcp(name):
    qid = random.randrange(1 << 16)
    s = socket.socket(NSFAM, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((NS, 53))
        if s.getpeername()[:2] != (NS, 53):
            return "peer:%s:%d" % s.getpeername()[:2]
        q = query(name, qid)
        s.sendall(struct.pack("!H", len(q)) + q)
        n = struct.unpack("!H", recvn(s, 2))[0]
        return answer(recvn(s, n), qid)
    except (OSError, EOFError) as e:
        return err(e) if isinstance(e, OSError) else "EOF"
    finally:
        s.close()
`

// batteryProbe is the battery proper, one line per probe (see
// TestRun_EgressBattery for what each must give).
const batteryProbe = probeLib + `
def checksum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF

def icmp(kind):
    try:
        s = socket.socket(INET, kind, socket.IPPROTO_ICMP)
    except OSError as e:
        return "socket:" + err(e)
    s.settimeout(2)
    body = struct.pack("!HH", 0x4242, 1) + b"cairn-probe!"
    pkt = struct.pack("!BBH", 8, 0, checksum(struct.pack("!BBH", 8, 0, 0) + body)) + body
    try:
        s.sendto(pkt, ("127.0.0.1", 0))
    except OSError as e:
        return "sendto:" + err(e)
    try:
        s.recv(1500)
        return "reply"
    except OSError as e:
        return "no-reply:" + err(e)
    finally:
        s.close()

# in_child runs fn in a child process (which may change its cgroup or
# network namespace) and returns what it returned.
def in_child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = fn()
        except BaseException as e:
            out = "error:" + repr(e)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.waitpid(pid, 0)
    return out.decode()

# A cgroup of our own below whatever /sys/fs/cgroup the sandbox sees, then
# a denied connect from wherever we ended up.
def subcgroup():
    d = "/sys/fs/cgroup/cairn-escape"
    try:
        os.mkdir(d)
        with open(d + "/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
        what = "joined:" + d
    except OSError as e:
        what = "no-subcgroup:" + err(e)
    return what + " connect:" + tcp(INET, "127.0.0.3", P, "subcgroup")

# A network namespace of our own, lo up, then a denied connect: to an
# address without a route there if unshare worked (nothing can leave a new
# namespace), else to the denied loopback server.
def netns():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:
        return "no-netns:" + errno.errorcode[ctypes.get_errno()] + " connect:" + tcp(INET, "127.0.0.3", P, "netns")
    s = socket.socket(INET, socket.SOCK_DGRAM)
    try:
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0)))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))
        what = "netns:lo-up"
    except OSError as e:
        what = "netns:lo-" + err(e)
    s.close()
    return what + " connect:" + tcp(INET, "192.0.2.1", 80, "netns")

print("tcp6-allowed", tcp(INET6, "::1", P6A, "tcp6-allowed"))
print("tcp6-denied", tcp(INET6, "::1", P6B, "tcp6-denied"))
print("mapped-allowed", tcp(INET6, "::ffff:127.0.0.4", P, "mapped-allowed"))
print("mapped-denied", tcp(INET6, "::ffff:127.0.0.3", P, "mapped-denied"))
print("mapped-udp-denied", udp_sendto(INET6, "::ffff:127.0.0.3", U, "mapped-udp-denied"))
print("udp-sendto-allowed", udp_sendto(INET, "127.0.0.4", U, "udp-sendto-allowed"))
print("udp-connect-allowed", udp_connect("127.0.0.4", U, "udp-connect-allowed"))
print("udp-sendto-denied", udp_sendto(INET, "127.0.0.3", U, "udp-sendto-denied"))
print("udp-connect-denied", udp_connect("127.0.0.3", U, "udp-connect-denied"))
print("tfo-allowed", tfo("127.0.0.4", P, "tfo-allowed"))
print("tfo-denied", tfo("127.0.0.3", P, "tfo-denied"))
print("icmp-raw", icmp(socket.SOCK_RAW))
print("icmp-ping", icmp(socket.SOCK_DGRAM))
print("literal-before-dns", tcp(INET, "127.0.0.6", P, "literal-before-dns"))
print("dns-udp-late", dns_udp("late.test"))
print("literal-after-dns", tcp(INET, "127.0.0.6", P, "literal-after-dns"))
print("dns-udp-allowed", dns_udp("allowed.test"))
print("dns-tcp-allowed", dns_tcp("allowed.test"))
print("dns-udp-denied", dns_udp("denied.test"))
print("dns-tcp-denied", dns_tcp("denied.test"))
print("dns-udp-rebind", dns_udp("rebind.test"))
print("dns-tcp-rebind", dns_tcp("rebind.test"))
print("dns-udp-rebind10", dns_udp("rebind10.test"))
print("connect-rebind", tcp(INET, "127.0.0.5", P, "connect-rebind"))
print("subcgroup", in_child(subcgroup))
print("netns", in_child(netns))
`

// auditProbe makes exactly the attempts TestRun_EgressBattery/Audit
// expects in the turn's egress log.
const auditProbe = probeLib + `
print("a", tcp(INET, "127.0.0.4", P, "audit"))
print("b", tcp(INET, "127.0.0.3", P, "audit"))
print("c", tcp(INET, "127.0.0.3", P, "audit"))
print("d", tcp(INET6, "::ffff:127.0.0.3", P, "audit"))
print("e", udp_sendto(INET, "127.0.0.3", U, "audit"))
print("f", tcp(INET6, "::1", P6A, "audit"))
print("g", tcp(INET6, "::1", P6B, "audit"))
print("h", dns_udp("denied.test"))
`

// killProbe connects to the denied server every 50 ms, forever.
const killProbe = `
import errno, socket, sys, time
p = int(sys.argv[1])
print("ready", flush=True)
while True:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.3", p))
        r = "connected"
    except OSError as e:
        r = errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__
    s.close()
    print("attempt", r, flush=True)
    time.sleep(0.05)
`

// parseProbe turns the probe's "name result" lines into a map.
func parseProbe(t *testing.T, out string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, " ")
		got[k] = v
	}
	return got
}

// resolvConfNameserver is the first nameserver of the host's resolv.conf,
// which the sandbox (whose root is the host's /) asks.
func resolvConfNameserver(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "nameserver" {
			return f[1]
		}
	}
	t.Fatal("no nameserver in /etc/resolv.conf")
	return ""
}

// TestRun_EgressBattery: issue 8's bypass attempts through `cairn run`:
// each is denied at once (EPERM, never a timeout), what is allowed gets
// through, and the denied servers never see a connection or a datagram; the
// turn's egress log lists exactly what was tried; and a killed supervisor
// leaves the sandbox dead and denied, and its leftovers to the next run.
func TestRun_EgressBattery(t *testing.T) {
	in := newInstance(t)
	t.Cleanup(func() { in.cleanupMount("ws", in.record("ws").dirOrEmpty()) })
	upstream := dnsUpstream(t, map[string]string{
		"allowed.test":  "127.0.0.2",
		"late.test":     "127.0.0.6",
		"rebind.test":   "127.0.0.5",
		"rebind10.test": "10.1.2.3",
		"denied.test":   "127.0.0.3", // never asked: the forwarder refuses it
	})
	// TCP on one port of 127.0.0.3 (denied), .4 (allowed by address), .5
	// (a rebinding answer) and .6 (an allowed name's address); two ports of
	// ::1; UDP on one port of .3 and .4.
	port, tcp4 := tcpServers(t, "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6")
	denied4, allowed4, rebind4, late4 := tcp4[0], tcp4[1], tcp4[2], tcp4[3]
	p6a, tcp6a := tcpServers(t, "::1")
	p6b, tcp6b := tcpServers(t, "::1")
	uport, udp4 := udpServers(t, "127.0.0.3", "127.0.0.4")
	deniedUDP, allowedUDP := udp4[0], udp4[1]
	cfg, _ := json.Marshal(map[string]int{"p": port, "p6a": p6a, "p6b": p6b, "u": uport})

	policy := filepath.Join(t.TempDir(), "egress.yaml")
	os.WriteFile(policy, []byte(fmt.Sprintf(`mode: policy
allowHosts:
  - name: allowed.test
    ports: [%[1]d]
    allowPrivateAnswers: true
  - name: late.test
    ports: [%[1]d]
    allowPrivateAnswers: true
  - rebind.test:%[1]d
  - rebind10.test:%[1]d
`, port)), 0o644)
	rules := []string{"--net-policy", policy, "--allow", fmt.Sprintf("127.0.0.4:%d,%d", port, uport),
		"--allow", fmt.Sprintf("[::1]:%d", p6a), "--dns-upstream", upstream}

	t.Run("Probes", func(t *testing.T) {
		args := append(append([]string{"run", "ws", "--no-snapshot"}, rules...), "--", "/usr/bin/python3", "-c", batteryProbe, string(cfg))
		r := in.run(args...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		got := parseProbe(t, r.stdout)
		for k, want := range map[string]string{
			"tcp6-allowed":        "ok",
			"tcp6-denied":         "EPERM",
			"mapped-allowed":      "ok",
			"mapped-denied":       "EPERM",
			"mapped-udp-denied":   "EPERM",
			"udp-sendto-allowed":  "ok",
			"udp-connect-allowed": "ok",
			"udp-sendto-denied":   "EPERM",
			"udp-connect-denied":  "EPERM",
			"tfo-allowed":         "ok",
			"tfo-denied":          "EPERM",
			"literal-before-dns":  "EPERM", // an allowed name's address, not resolved yet
			"dns-udp-late":        "NOERROR 127.0.0.6",
			"literal-after-dns":   "ok",
			"dns-udp-allowed":     "NOERROR 127.0.0.2",
			"dns-tcp-allowed":     "NOERROR 127.0.0.2",
			"dns-udp-denied":      "REFUSED -",
			"dns-tcp-denied":      "REFUSED -",
			"dns-udp-rebind":      "NOERROR -", // 127.0.0.5 stripped
			"dns-tcp-rebind":      "NOERROR -",
			"dns-udp-rebind10":    "NOERROR -", // 10.1.2.3 stripped
			"connect-rebind":      "EPERM",
		} {
			if got[k] != want {
				t.Errorf("%s: %q, want %q", k, got[k], want)
			}
		}
		// Raw ICMP and the ping socket fail at socket() (no CAP_NET_RAW;
		// ping_group_range) or at sendto (the backstop); no reply comes.
		for _, k := range []string{"icmp-raw", "icmp-ping"} {
			if v := got[k]; !strings.HasPrefix(v, "socket:E") && !strings.HasPrefix(v, "sendto:EPERM") {
				t.Errorf("%s: %q, want a failure at socket() or sendto", k, v)
			}
		}
		// A cgroup or a network namespace of the sandbox's own: whether it
		// could make one or not, the connect from there is denied.
		for _, k := range []string{"subcgroup", "netns"} {
			if !strings.HasSuffix(got[k], " connect:EPERM") {
				t.Errorf("%s: %q, want the connect denied (EPERM)", k, got[k])
			}
			t.Logf("%s: %s", k, got[k])
		}

		// What reached the servers.
		for name, s := range map[string]*probeServer{"127.0.0.3": denied4, "[::1]:P6B": tcp6b[0], "127.0.0.5": rebind4} {
			if n, lines := s.snapshot(); n != 0 {
				t.Errorf("denied TCP server %s accepted %d connections (%q)", name, n, lines)
			}
		}
		if _, got := deniedUDP.snapshot(); len(got) != 0 {
			t.Errorf("denied UDP server received %q", got)
		}
		for name, c := range map[string]struct {
			s    *probeServer
			want []string
		}{
			"127.0.0.4 tcp": {allowed4, []string{"mapped-allowed", "tfo-allowed"}},
			"127.0.0.6 tcp": {late4, []string{"literal-after-dns"}},
			"[::1] tcp":     {tcp6a[0], []string{"tcp6-allowed"}},
			"127.0.0.4 udp": {allowedUDP, []string{"udp-sendto-allowed", "udp-connect-allowed"}},
		} {
			_, got := c.s.snapshot()
			slices.Sort(got)
			slices.Sort(c.want)
			if !slices.Equal(got, c.want) {
				t.Errorf("allowed server %s received %q, want %q", name, got, c.want)
			}
		}
		if t.Failed() {
			t.Logf("probe output:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	})

	// One turn whose every attempt is known: its egress log holds those
	// destinations and nothing else.
	t.Run("Audit", func(t *testing.T) {
		args := append(append([]string{"run", "ws"}, rules...), "--", "/usr/bin/python3", "-c", auditProbe, string(cfg))
		r := in.run(args...)
		if r.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		got := parseProbe(t, r.stdout)
		for k, want := range map[string]string{"a": "ok", "b": "EPERM", "c": "EPERM", "d": "EPERM", "e": "EPERM", "f": "ok", "g": "EPERM", "h": "REFUSED -"} {
			if got[k] != want {
				t.Errorf("attempt %s: %q, want %q", k, got[k], want)
			}
		}
		var show struct {
			Egress struct {
				Destinations []struct {
					Addr     string `json:"addr"`
					Port     int    `json:"port"`
					Protocol string `json:"protocol"`
					Verdict  string `json:"verdict"`
					Count    int    `json:"count"`
				} `json:"destinations"`
			} `json:"egress"`
		}
		if err := json.Unmarshal([]byte(in.must("show", "--json", "ws")), &show); err != nil {
			t.Fatal(err)
		}
		var log []string
		for _, d := range show.Egress.Destinations {
			log = append(log, fmt.Sprintf("%s %d %s %s", d.Addr, d.Port, d.Protocol, d.Verdict))
		}
		want := []string{
			fmt.Sprintf("127.0.0.4 %d tcp allowed", port),
			fmt.Sprintf("127.0.0.3 %d tcp denied", port), // b, c and d (v4-mapped: shown as IPv4)
			fmt.Sprintf("127.0.0.3 %d udp denied", uport),
			fmt.Sprintf("::1 %d tcp allowed", p6a),
			fmt.Sprintf("::1 %d tcp denied", p6b),
			resolvConfNameserver(t) + " 53 udp redirected", // h, to the forwarder
		}
		slices.Sort(log)
		slices.Sort(want)
		if !slices.Equal(log, want) {
			t.Errorf("egress log:\n  %s\nwant exactly:\n  %s", strings.Join(log, "\n  "), strings.Join(want, "\n  "))
		}
	})

	t.Run("SupervisorKilled", func(t *testing.T) {
		supervisorKilled(t, in, port, denied4)
	})
	in.noStrays()
}

// supervisorKilled: SIGKILL `cairn run` while its workload keeps trying a
// denied server. The sandbox dies with it (nothing of it survives), its
// cgroup stays denied (the pinned programs), the server never sees a
// connection, and the next run of the home removes the bpffs, the pins and
// the cgroup that the killed run left.
func supervisorKilled(t *testing.T, in *instance, port int, denied *probeServer) {
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd := exec.Command(cairnBin, "run", "ws", "--no-snapshot", "--allow", fmt.Sprintf("127.0.0.4:%d", port),
		"--", "/usr/bin/python3", "-c", killProbe, strconv.Itoa(port))
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "AWS_EC2_METADATA_DISABLED=true"}, in.env()...)
	cmd.Stdout, cmd.Stderr = outW, errFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	var cgroup string
	t.Cleanup(func() { cleanupKilledRun(t, cmd, in.home, cgroup) })

	// Wait for the workload's first attempts (they are denied), with a
	// deadline for a run that never gets there.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	attempts := func(n int) {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for n > 0 {
			select {
			case l, ok := <-lines:
				if !ok {
					stderr, _ := os.ReadFile(errFile.Name())
					t.Fatalf("the workload's output ended; cairn run's stderr:\n%s", stderr)
				}
				if l == "ready" {
					continue
				}
				if l != "attempt EPERM" {
					t.Fatalf("while the supervisor runs: %q, want \"attempt EPERM\"", l)
				}
				n--
			case <-deadline:
				t.Fatal("the workload made no attempt for 2 minutes")
			}
		}
	}
	attempts(3)
	cgroup = sandboxCgroup(t, cmd.Process.Pid)
	if !strings.HasPrefix(filepath.Base(cgroup), in.runCgroupPrefix()) {
		t.Errorf("the run's cgroup %s is not named %s*: noStrays would not see it", cgroup, in.runCgroupPrefix())
	}
	mounts, _ := filepath.Glob(filepath.Join(in.home, "run", "bpf-*"))
	if len(mounts) != 1 || !slices.Equal(mountsUnder(t, mounts[0]), mounts) {
		t.Fatalf("per-run bpffs mounts while running: %v, want one, mounted", mounts)
	}
	// Another run of the home meanwhile leaves the live run's mount alone.
	if r := in.run("run", "ws", "--no-snapshot", "--", "true"); r.code != 0 {
		t.Fatalf("a second run: exit %d\n%s", r.code, r.stderr)
	}
	if m := mountsUnder(t, mounts[0]); len(m) != 1 {
		t.Fatalf("the live run's bpffs after another run of the home: mounts %v", m)
	}
	attempts(2)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// Nothing of the sandbox survives its supervisor: the cgroup empties
	// (init has PDEATHSIG; the pid namespace goes with it).
	for stop := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if !cgroupPopulated(t, cgroup) {
			break
		}
		if time.Now().After(stop) {
			procs, _ := os.ReadFile(filepath.Join(cgroup, "cgroup.procs"))
			t.Fatalf("processes of the sandbox still alive a minute after its supervisor was killed: %s", procs)
		}
	}
	for range lines { // drain: the workload is gone
	}
	// The pinned programs keep the cgroup denied: a process put in it now
	// (the killed supervisor can decide nothing) cannot reach the server.
	if got := runInCgroup(t, cgroup, fmt.Sprintf(`
import errno, socket
s = socket.socket(); s.settimeout(5)
try:
    s.connect(("127.0.0.3", %d)); print("connected")
except OSError as e:
    print(errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__)
`, port)); got != "EPERM" {
		t.Errorf("a process in the killed run's cgroup: connect %q, want EPERM (the pinned programs must stay)", got)
	}
	if n, _ := denied.snapshot(); n != 0 {
		t.Errorf("the denied server accepted %d connections", n)
	}

	// The next run of the home cleans up.
	if r := in.run("run", "ws", "--no-snapshot", "--", "true"); r.code != 0 || strings.Contains(r.stderr, "clean up after an earlier run") {
		t.Fatalf("the next run: exit %d\n%s", r.code, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(in.home, "run", "bpf-*")); len(left) > 0 {
		t.Errorf("per-run bpffs directories left after the next run: %v", left)
	}
	if m := mountsUnder(t, filepath.Join(in.home, "run")); len(m) > 0 {
		t.Errorf("mounts left under %s/run after the next run: %v", in.home, m)
	}
	if _, err := os.Stat(cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed run's cgroup %s after the next run: %v", cgroup, err)
	}
}

// sandboxCgroup is the cgroup2 directory of the sandbox that the cairn run
// process pid started: that of its child in a cairn-run-* cgroup.
func sandboxCgroup(t *testing.T, pid int) string {
	t.Helper()
	root := cgroup2Mount(t)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		data, _ := os.ReadFile(f)
		for _, child := range strings.Fields(string(data)) {
			cg, _ := os.ReadFile("/proc/" + child + "/cgroup")
			for l := range strings.SplitSeq(string(cg), "\n") {
				if p, ok := strings.CutPrefix(l, "0::"); ok && strings.Contains(p, "/cairn/cairn-run-") {
					return filepath.Join(root, p)
				}
			}
		}
	}
	t.Fatalf("no child of cairn run (pid %d) in a sandbox cgroup", pid)
	return ""
}

// cgroup2Mount is where the whole cgroup2 hierarchy is mounted.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if f := strings.Fields(pre); ok && strings.HasPrefix(post, "cgroup2 ") && len(f) >= 5 && f[3] == "/" {
			return f[4]
		}
	}
	t.Fatal("no cgroup2 mount (the egress policy needs one)")
	return ""
}

func cgroupPopulated(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), "populated 1")
}

// runInCgroup runs a Python script in the cgroup2 directory dir (as this
// test's process, root, in the host's namespaces) and returns its output.
func runInCgroup(t *testing.T, dir, script string) string {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("/usr/bin/python3", "-c", script)
	cmd.SysProcAttr = &unix.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd()), Pdeathsig: unix.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 in %s: %v", dir, err)
	}
	return strings.TrimSpace(string(out))
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// cleanupKilledRun makes sure, whatever happened, that the killed run
// leaves nothing: its process, its bpffs (unmounting it drops the pins) and
// its cgroup.
func cleanupKilledRun(t *testing.T, cmd *exec.Cmd, home, cgroup string) {
	if cmd.ProcessState == nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
	for _, m := range mountsUnder(t, filepath.Join(home, "run")) {
		unix.Unmount(m, unix.MNT_DETACH)
	}
	if cgroup == "" {
		return
	}
	os.WriteFile(filepath.Join(cgroup, "cgroup.kill"), []byte("1"), 0)
	for stop := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := unix.Rmdir(cgroup)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if time.Now().After(stop) {
			t.Errorf("remove cgroup %s: %v", cgroup, err)
			return
		}
	}
}
