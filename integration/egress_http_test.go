package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The HTTP method rules through the binary: cairn's proxy, with and without
// TLS interception (--http-intercept), against servers on loopback under
// test names that a fake DNS upstream answers.

// httpTestNames are the test's names and the loopback addresses they
// resolve to: a plain HTTP server, an HTTPS server with method rules, and
// an HTTPS server without (tunnelled).
var httpTestNames = map[string]string{"http.test.": "127.0.0.5", "tls.test.": "127.0.0.6", "other.test.": "127.0.0.7"}

// httpTestUpstream is a DNS server on loopback answering httpTestNames.
func httpTestUpstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.ToLower(q.Question[0].Name)
		if ip := httpTestNames[name]; ip != "" && q.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(fmt.Sprintf("%s 60 IN A %s", name, ip))
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// testPKI is a test CA (organization "cairn test") and a server
// certificate it issued for the test names.
type testPKI struct {
	caPEM []byte
	cert  tls.Certificate
}

func newTestPKI(t *testing.T, names ...string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cairn test CA", Organization: []string{"cairn test"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0], Organization: []string{"cairn test"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: names,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert:  tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}
}

// httpTestServer serves "NAME METHOD PATH" on addr ("127.0.0.5:0"), over
// TLS with cert when it is not nil, and returns its port.
func httpTestServer(t *testing.T, name, addr string, cert *tls.Certificate) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s", name, r.Method, r.URL.Path)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes the sandbox refuses, by design
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return ln.Addr().(*net.TCPAddr).Port
}

// httpProbe is what the sandboxed command tries, one line each: through
// the proxy the environment names (urllib honours http_proxy, https_proxy
// and SSL_CERT_FILE), by hand (CONNECT, to see the proxy's answer and the
// certificate), and directly.
const httpProbe = `
import os, socket, ssl, sys, urllib.error, urllib.parse, urllib.request
hp, tp, op = (int(a) for a in sys.argv[1:4])
def fetch(method, url):
    req = urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return "%d %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "%d %s" % (e.code, e.read().decode().splitlines()[0])
    except (urllib.error.URLError, OSError) as e:
        return "error " + str(getattr(e, "reason", e)).replace("\n", " ")
def connect(target):
    p = urllib.parse.urlsplit(os.environ["https_proxy"])
    s = socket.create_connection((p.hostname, p.port), timeout=20)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    n = 0
    for l in lines[1:]:
        k, _, v = l.partition(":")
        if k.lower() == "content-length":
            n = int(v)
    while len(body) < n:
        d = s.recv(4096)
        if not d:
            break
        body += d
    return s, int(lines[0].split()[1]), body.decode().strip()
def issuer(target, name):
    try:
        s, code, body = connect(target)
        if code != 200:
            return "%d %s" % (code, body)
        t = ssl.create_default_context().wrap_socket(s, server_hostname=name)
        org = dict(x[0] for x in t.getpeercert()["issuer"]).get("organizationName")
        t.close()
        return org.replace(" ", "_")
    except OSError as e:
        return "error " + type(e).__name__
def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close(); return "ok"
    except OSError as e: return type(e).__name__
def resolve(name):
    try: return socket.gethostbyname(name)
    except OSError as e: return type(e).__name__
print("env", os.environ.get("SSL_CERT_FILE", "-"), os.environ.get("NODE_EXTRA_CA_CERTS", "-"), os.environ.get("REQUESTS_CA_BUNDLE", "-"),
      os.environ.get("CURL_CA_BUNDLE", "-"), os.environ.get("GIT_SSL_CAINFO", "-"), os.environ.get("PIP_CERT", "-"))
print("http-get", fetch("GET", "http://http.test:%d/g" % hp))
print("http-head", fetch("HEAD", "http://http.test:%d/h" % hp))
print("http-post", fetch("POST", "http://http.test:%d/p" % hp))
print("http-direct", direct("127.0.0.5", hp))
print("tls-resolve", resolve("tls.test"))
print("tls-get", fetch("GET", "https://tls.test:%d/g" % tp))
print("tls-post", fetch("POST", "https://tls.test:%d/p" % tp))
print("tls-connect", issuer("tls.test:%d" % tp, "tls.test"))
print("tls-direct", direct("127.0.0.6", tp))
print("other-get", fetch("GET", "https://other.test:%d/o" % op))
print("other-connect", issuer("other.test:%d" % op, "other.test"))
try:
    data = b"".join(open(os.path.join("/run/cairn", f), "rb").read() for f in sorted(os.listdir("/run/cairn")))
    print("ca-files", " ".join(sorted(os.listdir("/run/cairn"))), "key" if b"PRIVATE KEY" in data else "nokey")
except OSError as e:
    print("ca-files", type(e).__name__)
try:
    open("/run/cairn/ca-bundle.pem", "a").close(); print("ca-write ok")
except OSError:
    print("ca-write denied")
`

// TestRun_EgressHTTP: method rules through cairn's proxy, for plain HTTP,
// for HTTPS without interception (denied, with the reason) and with it
// (enforced, under a CA made for the run), a tunnel to a host without
// method rules, and the turn's egress log.
func TestRun_EgressHTTP(t *testing.T) {
	in := newInstance(t)
	upstream := httpTestUpstream(t)
	pki := newTestPKI(t, "tls.test", "other.test")
	httpPort := httpTestServer(t, "plain", "127.0.0.5:0", nil)
	tlsPort := httpTestServer(t, "tls", "127.0.0.6:0", &pki.cert)
	otherPort := httpTestServer(t, "other", "127.0.0.7:0", &pki.cert)
	// cairn (its proxy) trusts the test CA as its system roots, and gives
	// them to the sandbox with --http-intercept.
	caFile := filepath.Join(t.TempDir(), "test-ca.pem")
	if err := os.WriteFile(caFile, pki.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	in.extra = append(in.extra, "SSL_CERT_FILE="+caFile)
	// The names resolve to loopback: their rules keep private answers,
	// which needs the policy file; the method rules are flags.
	policy := filepath.Join(t.TempDir(), "egress.yaml")
	os.WriteFile(policy, []byte(fmt.Sprintf(`mode: policy
allowHosts:
  - {name: http.test, ports: [%d], allowPrivateAnswers: true}
  - {name: tls.test, ports: [%d], allowPrivateAnswers: true}
  - {name: other.test, ports: [%d], allowPrivateAnswers: true}
`, httpPort, tlsPort, otherPort)), 0o644)
	ports := []string{strconv.Itoa(httpPort), strconv.Itoa(tlsPort), strconv.Itoa(otherPort)}
	run := func(extra ...string) (map[string]string, string) {
		t.Helper()
		args := append([]string{"run", "ws", "--net-policy", policy, "--dns-upstream", upstream,
			"--http-methods", "http.test=GET,HEAD", "--http-methods", "tls.test=GET,HEAD"}, extra...)
		args = append(append(args, "--", "/usr/bin/python3", "-c", httpProbe), ports...)
		r := in.run(args...)
		if r.code != 0 {
			t.Fatalf("cairn %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(extra, " "), r.code, r.stdout, r.stderr)
		}
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			k, v, _ := strings.Cut(l, " ")
			got[k] = v
		}
		m := regexp.MustCompile(`cairn: snapshot (\S+) `).FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("no snapshot ID in stderr:\n%s", r.stderr)
		}
		t.Logf("cairn run %s:\n%s", strings.Join(extra, " "), r.stdout)
		return got, m[1]
	}
	check := func(what string, got, want map[string]string) {
		t.Helper()
		for k, w := range want {
			if g := got[k]; g != w && !(strings.HasSuffix(w, "*") && strings.HasPrefix(g, strings.TrimSuffix(w, "*"))) {
				t.Errorf("%s: %s = %q, want %q", what, k, g, w)
			}
		}
	}
	t.Cleanup(func() { in.cleanupMount("ws", in.record("ws").dirOrEmpty()) })

	// Without interception: plain HTTP is enforced; HTTPS to the ruled
	// host is refused at CONNECT, the proxy saying why; the tunnel to the
	// host without rules opens, and the sandbox gets the real server's
	// certificate, which its own roots do not trust.
	got, snap1 := run()
	check("without --http-intercept", got, map[string]string{
		"env":           "- - - - - -",
		"http-get":      "200 plain GET /g",
		"http-head":     "200 ",
		"http-post":     `403 cairn: POST to http.test:` + ports[0] + ` denied by egress policy: rule "http.test" allows GET, HEAD on port ` + ports[0],
		"http-direct":   "PermissionError",
		"tls-resolve":   "gaierror",
		"tls-get":       "error Tunnel connection failed: 403*",
		"tls-post":      "error Tunnel connection failed: 403*",
		"tls-connect":   "403 cairn: CONNECT to tls.test:" + ports[1] + " denied by egress policy: rule \"tls.test\" allows GET, HEAD on port " + ports[1] + "; HTTP methods cannot be enforced inside TLS without interception*",
		"tls-direct":    "PermissionError",
		"other-get":     "error *", // the sandbox trusts only its own roots: not the test CA
		"other-connect": "error SSLCertVerificationError",
		"ca-files":      "FileNotFoundError",
		"ca-write":      "denied",
	})

	// With interception: HTTPS to tls.test is read by the proxy, under a
	// CA made for the run; the methods are enforced; other.test stays a
	// blind tunnel with the real certificate; the CA's key is nowhere in
	// the sandbox, whose CA files are read-only.
	got, snap2 := run("--http-intercept")
	const bundle = "/run/cairn/ca-bundle.pem"
	check("with --http-intercept", got, map[string]string{
		"env":           strings.Join([]string{bundle, "/run/cairn/ca.pem", bundle, bundle, bundle, bundle}, " "),
		"http-get":      "200 plain GET /g",
		"http-post":     "403 cairn: POST to http.test:*",
		"http-direct":   "PermissionError",
		"tls-resolve":   "gaierror",
		"tls-get":       "200 tls GET /g",
		"tls-post":      `403 cairn: POST to tls.test:` + ports[1] + ` denied by egress policy: rule "tls.test" allows GET, HEAD on port ` + ports[1],
		"tls-connect":   "cairn_sandbox",
		"tls-direct":    "PermissionError",
		"other-get":     "200 other GET /o",
		"other-connect": "cairn_test",
		"ca-files":      "ca-bundle.pem ca.pem nokey",
		"ca-write":      "denied",
	})

	// The records: each request with its method and verdict, and whether
	// interception was on.
	type destination struct {
		Addr     string `json:"addr"`
		Port     int    `json:"port"`
		Protocol string `json:"protocol"`
		Verdict  string `json:"verdict"`
		Count    int    `json:"count"`
	}
	show := func(snap string) (map[string]string, bool) {
		t.Helper()
		var rec struct {
			Egress struct {
				Destinations  []destination `json:"destinations"`
				HTTPIntercept bool          `json:"http_intercept"`
			} `json:"egress"`
		}
		if err := json.Unmarshal([]byte(in.must("show", "--json", snap)), &rec); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range rec.Egress.Destinations {
			out[fmt.Sprintf("%s:%d %s %s", d.Addr, d.Port, d.Protocol, d.Verdict)] = strconv.Itoa(d.Count)
		}
		return out, rec.Egress.HTTPIntercept
	}
	h, tp, op := "http.test:"+ports[0], "tls.test:"+ports[1], "other.test:"+ports[2]
	log1, intercept1 := show(snap1)
	if intercept1 {
		t.Errorf("the first run's record says interception was on")
	}
	check("the first run's egress log", log1, map[string]string{
		h + " http GET allowed":                 "1",
		h + " http HEAD allowed":                "1",
		h + " http POST denied":                 "1",
		tp + " https (tunnel) denied":           "3", // urllib's two CONNECTs and the probe's
		op + " https (tunnel) allowed":          "2",
		"127.0.0.5:" + ports[0] + " tcp denied": "1",
		"127.0.0.6:" + ports[1] + " tcp denied": "1",
	})
	log2, intercept2 := show(snap2)
	if !intercept2 {
		t.Errorf("the second run's record does not say interception was on")
	}
	check("the second run's egress log", log2, map[string]string{
		h + " http GET allowed":                     "1",
		h + " http POST denied":                     "1",
		tp + " https CONNECT (intercepted) allowed": "3",
		tp + " https GET allowed":                   "1",
		tp + " https POST denied":                   "1",
		op + " https (tunnel) allowed":              "2",
		"127.0.0.6:" + ports[1] + " tcp denied":     "1",
	})
	for k := range log2 {
		if strings.Contains(k, "tls.test") && strings.Contains(k, "https (tunnel)") {
			t.Errorf("the second run's log has a blind tunnel to tls.test: %s", k)
		}
	}
	if out := in.must("show", snap2); !strings.Contains(out, "HTTPS to the hosts with method rules intercepted") ||
		!strings.Contains(out, "https POST "+tp) {
		t.Errorf("cairn show does not print the interception:\n%s", out)
	}

	// Bad input: interception without method rules to enforce.
	for _, args := range [][]string{
		{"run", "ws", "--http-intercept", "--", "true"},
		{"run", "ws", "--allow-host", "a.test:443", "--http-intercept", "--", "true"},
		{"run", "ws", "--net", "none", "--http-intercept", "--", "true"},
		{"run", "ws", "--net-policy", policy, "--http-methods", "tls.test=GET", "--http-intercept", "--env", "SSL_CERT_FILE=/x", "--", "true"},
	} {
		r := in.run(args...)
		if r.code != 2 {
			t.Errorf("cairn %s: exit %d, want 2\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		if strings.Contains(strings.Join(args, " "), "--env") {
			if !strings.Contains(r.stderr, "drop --env SSL_CERT_FILE") {
				t.Errorf("cairn %s: %s", strings.Join(args, " "), r.stderr)
			}
		} else if !strings.Contains(r.stderr, "--http-") {
			t.Errorf("cairn %s: the error does not name the fix: %s", strings.Join(args, " "), r.stderr)
		}
	}
	in.noStrays()
}
