package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeUpstream is a DNS server on loopback (UDP and TCP): allowed.test and
// other.test answer 127.0.0.2, meta.test the cloud metadata address.
func fakeUpstream(t *testing.T) string {
	t.Helper()
	return dnsUpstream(t, map[string]string{"allowed.test": "127.0.0.2", "other.test": "127.0.0.2", "meta.test": "169.254.169.254"})
}

// egressProbe is what the sandboxed command tries, one line each.
const egressProbe = `
import socket, sys
port = int(sys.argv[1]); hostport = int(sys.argv[2])
def tcp(host, p):
    try:
        socket.create_connection((host, p), timeout=5).close(); return "ok"
    except OSError as e: return type(e).__name__
def resolve(name):
    try: return socket.gethostbyname(name)
    except OSError as e: return type(e).__name__
def udp(host, p):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", (host, p)); return "ok"
    except OSError as e: return type(e).__name__
print("resolve-allowed", resolve("allowed.test"))
print("connect-allowed", tcp("allowed.test", port))
print("connect-allowed-other-port", tcp("127.0.0.2", port + 1))
print("resolve-denied", resolve("denied.test"))
print("resolve-meta", resolve("meta.test"))
print("connect-literal", tcp("127.0.0.3", port))
print("connect-host-loopback", tcp("127.0.0.1", hostport))
print("connect-cidr", tcp("127.0.0.4", port))
print("udp-denied", udp("127.0.0.3", 9))
`

// TestRun_Egress: cairn run with an egress policy (a policy file and flags):
// allowed names resolve and connect, everything else fails fast, and the
// turn's record lists what was tried.
func TestRun_Egress(t *testing.T) {
	in := newInstance(t)
	upstream := fakeUpstream(t)
	// One server on 127.0.0.2-4 (all of 127/8 is lo), and a host service
	// on 127.0.0.1.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	var lns []net.Listener
	lns = append(lns, ln)
	for _, a := range []string{"127.0.0.2:" + strconv.Itoa(port+1), "127.0.0.3:" + strconv.Itoa(port), "127.0.0.4:" + strconv.Itoa(port), "127.0.0.1:0"} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Skipf("listen %s: %v (port taken: rerun)", a, err)
		}
		lns = append(lns, l)
	}
	hostPort := lns[len(lns)-1].Addr().(*net.TCPAddr).Port
	for _, l := range lns {
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	// The name rule in a policy file (loopback answers are private: the
	// file opts in for this name), the address rule as a flag.
	policy := filepath.Join(t.TempDir(), "egress.yaml")
	os.WriteFile(policy, []byte(fmt.Sprintf("mode: policy\nallowHosts:\n  - name: allowed.test\n    ports: [%d]\n    allowPrivateAnswers: true\n  - name: meta.test\n", port)), 0o644)
	script := filepath.Join(t.TempDir(), "probe.py")
	os.WriteFile(script, []byte(egressProbe), 0o644)
	data, _ := os.ReadFile(script)
	r := in.run("run", "ws", "--net-policy", policy, "--allow", fmt.Sprintf("127.0.0.4:%d", port), "--dns-upstream", upstream,
		"--", "python3", "-c", string(data), strconv.Itoa(port), strconv.Itoa(hostPort))
	t.Cleanup(func() { in.cleanupMount("ws", in.record("ws").dirOrEmpty()) })
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		got[k] = v
	}
	for k, want := range map[string]string{
		"resolve-allowed":            "127.0.0.2",
		"connect-allowed":            "ok",
		"connect-allowed-other-port": "PermissionError",
		"resolve-denied":             "gaierror",
		"resolve-meta":               "gaierror", // 169.254.169.254 stripped: no address left
		"connect-literal":            "PermissionError",
		"connect-host-loopback":      "PermissionError",
		"connect-cidr":               "ok",
		"udp-denied":                 "PermissionError",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	var show struct {
		Egress struct {
			Mode         string `json:"mode"`
			Destinations []struct {
				Addr    string   `json:"addr"`
				Port    int      `json:"port"`
				Verdict string   `json:"verdict"`
				Count   int      `json:"count"`
				Names   []string `json:"names"`
			} `json:"destinations"`
			DNS []struct {
				Name, Outcome string
			} `json:"dns"`
		} `json:"egress"`
	}
	if err := json.Unmarshal([]byte(in.must("show", "--json", "ws")), &show); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, d := range show.Egress.Destinations {
		seen[fmt.Sprintf("%s:%d", d.Addr, d.Port)] = d.Verdict
	}
	for dst, want := range map[string]string{
		fmt.Sprintf("127.0.0.2:%d", port):     "allowed",
		fmt.Sprintf("127.0.0.2:%d", port+1):   "denied",
		fmt.Sprintf("127.0.0.3:%d", port):     "denied",
		fmt.Sprintf("127.0.0.1:%d", hostPort): "denied",
		fmt.Sprintf("127.0.0.4:%d", port):     "allowed",
		"127.0.0.3:9":                         "denied",
	} {
		if seen[dst] != want {
			t.Errorf("egress log: %s is %q, want %q (log: %v)", dst, seen[dst], want, seen)
		}
	}
	if show.Egress.Mode != "policy" || len(show.Egress.DNS) == 0 {
		t.Errorf("egress log mode %q, %d DNS entries", show.Egress.Mode, len(show.Egress.DNS))
	}
	if out := in.must("show", "ws"); !strings.Contains(out, "egress    policy policy") || !strings.Contains(out, "allowed.test") {
		t.Errorf("cairn show does not print the egress log:\n%s", out)
	}

	// Without a policy the sandbox has only its own loopback.
	r = in.run("run", "ws", "--no-snapshot", "--", "python3", "-c", string(data), strconv.Itoa(port), strconv.Itoa(hostPort))
	if !strings.Contains(r.stdout, "connect-cidr ConnectionRefusedError") && !strings.Contains(r.stdout, "connect-cidr OSError") {
		t.Errorf("--net none: the host's servers are reachable:\n%s", r.stdout)
	}
	// Bad policy input is a usage error naming the problem.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("mode: policy\nallowHosts:\n  - name: x.test\n    prots: [1]\n"), 0o644)
	for _, args := range [][]string{
		{"run", "ws", "--allow", "10.0.0.1/8", "--", "true"},
		{"run", "ws", "--net-policy", bad, "--", "true"},
		{"run", "ws", "--net", "none", "--allow", "10.0.0.0/8", "--", "true"},
		{"run", "ws", "--net", "sideways", "--", "true"},
	} {
		if r := in.run(args...); r.code != 2 {
			t.Errorf("cairn %s: exit %d, want 2\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	in.noStrays()
}
