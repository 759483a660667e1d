package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The sandbox's tests: cairn run through the binary, as a user runs it.

// probeDir builds the escape probe (internal/escapeprobe) into a directory
// the sandbox sees read-only (not /tmp, which the sandbox replaces), with a
// setuid-root copy and read-only fixtures to try writing to.
func probeDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "cairn-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	build := exec.Command("go", "build", "-o", filepath.Join(d, "escapeprobe"), "github.com/cairnfs/cairn/internal/escapeprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the escape probe: %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(d, "escapeprobe"))
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(d, "escapeprobe-setuid")
	if err := os.WriteFile(suid, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(d, "ro"), 0o777) // world-writable on the host: only the sandbox's read-only root protects it
	os.WriteFile(filepath.Join(d, "ro", "f"), []byte("fixture\n"), 0o666)
	os.WriteFile(filepath.Join(d, "ro.txt"), []byte("fixture\n"), 0o666)
	return d
}

type probeReport struct {
	Results []struct {
		Check, Status, Detail string
	} `json:"results"`
	Exit int `json:"exit"`
}

// TestRun_EscapeBattery runs the escape probe inside `cairn run`: every
// way out it knows must fail.
func TestRun_EscapeBattery(t *testing.T) {
	in := newInstance(t)
	d := probeDir(t)
	secret := "s3cr3t-" + strconv.Itoa(os.Getpid())
	marker := filepath.Join(os.TempDir(), "cairn-host-marker-"+strconv.Itoa(os.Getpid()))
	os.WriteFile(marker, []byte("host only\n"), 0o644)
	t.Cleanup(func() { os.Remove(marker) })
	secretFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(secretFile, []byte(secret+"-file\n"), 0o600)

	// Host services the sandbox must not reach: an abstract unix socket, a
	// TCP port on the host's loopback, and a unix socket file.
	abstract := "cairn-escape-" + strconv.Itoa(os.Getpid())
	la, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	lt, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Close()
	lu, err := net.Listen("unix", filepath.Join(d, "host.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lu.Close()
	for _, l := range []net.Listener{la, lt, lu} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("reached\n"))
				c.Close()
			}
		}()
	}

	in.extra = append(in.extra, "ESCAPE_SECRET="+secret)
	r := in.run("run", "ws", "--no-snapshot", "--setup", "test -s /tmp/secret.txt", "--secret-env", "ESCAPE_SECRET",
		"--secret-file", secretFile+":/tmp/secret.txt", "--",
		filepath.Join(d, "escapeprobe"), "-json", "-secret", "ESCAPE_SECRET="+secret, "-secret-file", "/tmp/secret.txt",
		"-marker", marker, "-host-pid", strconv.Itoa(os.Getpid()), "-host-port", strconv.Itoa(lt.Addr().(*net.TCPAddr).Port),
		"-abstract", abstract, "-unix", filepath.Join(d, "host.sock"), "-setuid", filepath.Join(d, "escapeprobe-setuid"),
		"-deny-write", strings.Join([]string{filepath.Join(d, "ro"), filepath.Join(d, "ro.txt"), "/etc", "/usr", "/var/tmp", "/root"}, ","),
		"-allow-write", "/workspace,/tmp", "all")
	var rep probeReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("probe output (exit %d): %v\nstdout: %s\nstderr: %s", r.code, err, r.stdout, r.stderr)
	}
	seen := map[string]bool{}
	for _, res := range rep.Results {
		seen[res.Check] = true
		switch res.Status {
		case "BLOCKED", "OK":
		default:
			t.Errorf("%s: %s %s", res.Check, res.Status, res.Detail)
		}
	}
	for _, c := range []string{"mount", "unshare-user", "setns", "ptrace-parent", "ptrace-init", "bpf", "io-uring", "int80", "proc-sys",
		"environ", "secret-file", "procs", "setuid", "caps", "devfuse", "abstract", "unix", "hostns-net", "write-deny", "write-allowed", "chroot", "tiocsti"} {
		if !seen[c] {
			t.Errorf("check %s did not run", c)
		}
	}
	if r.code != 0 {
		t.Errorf("cairn run exited %d, want the probe's 0\nstderr: %s", r.code, r.stderr)
	}
}

// TestRun_Turn: a turn's files are in its snapshot, the command's exit
// status and output pass through, and the record says what ran.
func TestRun_Turn(t *testing.T) {
	in := newInstance(t)
	r := in.run("run", "ws", "-m", "turn 1", "--label", "turn=1", "--", "sh", "-c",
		"echo out; echo err >&2; mkdir -p /workspace/src; echo 'package main' > /workspace/src/main.go; exit 7")
	t.Cleanup(func() { in.cleanupMount("ws", in.record("ws").dirOrEmpty()) })
	if r.code != 7 {
		t.Fatalf("exit %d, want 7 (the command's)\nstderr: %s", r.code, r.stderr)
	}
	if r.stdout != "out\n" || !strings.Contains(r.stderr, "err\n") {
		t.Errorf("stdout %q, stderr %q: want the command's", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "cairn: snapshot ") || !strings.Contains(r.stderr, "(ws@1): done") {
		t.Errorf("stderr does not name the snapshot: %q", r.stderr)
	}
	if got := in.must("cat", "ws:src/main.go"); got != "package main\n" {
		t.Errorf("cat ws:src/main.go = %q", got)
	}
	var show struct {
		Message    string            `json:"message"`
		Labels     map[string]string `json:"labels"`
		Provenance map[string]string `json:"provenance"`
	}
	if err := json.Unmarshal([]byte(in.must("show", "--json", "ws")), &show); err != nil {
		t.Fatal(err)
	}
	if show.Message != "turn 1" || show.Labels["turn"] != "1" {
		t.Errorf("message %q labels %v", show.Message, show.Labels)
	}
	for k, want := range map[string]string{"run.exit_status": "7", "run.rootfs": "/", "run.uid": "0 in the sandbox, 100000 on the host"} {
		if got := show.Provenance[k]; got != want {
			t.Errorf("provenance %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(show.Provenance["run.argv"], `"sh","-c"`) {
		t.Errorf("provenance run.argv = %q", show.Provenance["run.argv"])
	}

	// A second turn on the mounted workspace: the daemon is reused, the
	// first turn's files are there.
	r = in.run("run", "ws", "--", "cat", "/workspace/src/main.go")
	if r.code != 0 || r.stdout != "package main\n" || !strings.Contains(r.stderr, "(ws@2)") {
		t.Errorf("second turn: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// Signals: the command's death by SIGKILL is 128+9.
	if r := in.run("run", "ws", "--no-snapshot", "--", "sh", "-c", "kill -9 $$"); r.code != 137 {
		t.Errorf("killed command: exit %d, want 137", r.code)
	}
	// A command that does not exist.
	if r := in.run("run", "ws", "--no-snapshot", "--", "/no/such/command"); r.code == 0 || !strings.Contains(r.stderr, "/no/such/command") {
		t.Errorf("missing command: exit %d, stderr %q", r.code, r.stderr)
	}
	in.noStrays()
}

// noStrays checks that no sandbox cgroup of this instance's runs is left:
// every process of every run is gone with it. Runs name their cgroups
// cairn-run-TAG-RANDOM, TAG a hash of the state directory, so the runs of
// other cairns on the machine (other tests, other people) are not counted.
func (in *instance) noStrays() {
	in.t.Helper()
	name := in.runCgroupPrefix() + "*"
	var all []string
	for _, depth := range []string{"", "*", "*/*", "*/*/*"} {
		m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", depth, "cairn", name))
		all = append(all, m...)
	}
	if len(all) > 0 {
		in.t.Errorf("sandbox cgroups left behind: %v", all)
	}
}

// TestRun_Secrets: the setup phase sees the secrets; the agent phase and the
// snapshot do not, and the record lists the excluded file.
func TestRun_Secrets(t *testing.T) {
	in := newInstance(t)
	secret := "tok-" + strconv.Itoa(os.Getpid()) + "-abcdef"
	src := filepath.Join(t.TempDir(), "npmrc")
	os.WriteFile(src, []byte("//registry/:_authToken="+secret+"\n"), 0o600)
	in.extra = append(in.extra, "API_TOKEN="+secret)
	// The setup command proves it saw both secrets without naming them
	// (its text is in the record): a digest of each goes to the workspace.
	r := in.run("run", "ws", "--setup", `printf %s "$API_TOKEN" | sha256sum | cut -c1-16 > /workspace/setup.txt && sed 's/.*=//' /workspace/.npmrc | tr -d '\n' | sha256sum | cut -c1-16 >> /workspace/setup.txt`,
		"--secret-env", "API_TOKEN", "--secret-file", src+":/workspace/.npmrc", "--",
		"sh", "-c", `echo "token=[$API_TOKEN]"; test -e /workspace/.npmrc && echo npmrc-present; cat /proc/1/environ 2>/dev/null | tr '\0' '\n' | grep -c API_TOKEN; true`)
	t.Cleanup(func() { in.cleanupMount("ws", in.record("ws").dirOrEmpty()) })
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, "npmrc-present") || !strings.Contains(r.stdout, "token=[]") {
		t.Errorf("the agent phase saw a secret: %q", r.stdout)
	}
	sum := sha256.Sum256([]byte(secret))
	digest := hex.EncodeToString(sum[:])[:16] + "\n"
	if got := in.must("cat", "ws:setup.txt"); got != digest+digest {
		t.Errorf("setup phase did not see its secrets: setup.txt = %q, want %q twice", got, digest)
	}
	// The snapshot holds no trace of the secret: not as a file, not in any
	// file's content, not in the record.
	export := filepath.Join(t.TempDir(), "ws.tar")
	in.must("export", "ws", "-o", export)
	tarData, _ := os.ReadFile(export)
	if strings.Contains(string(tarData), secret) || strings.Contains(string(tarData), ".npmrc") {
		t.Errorf("the snapshot holds the secret file or its content")
	}
	show := in.must("show", "--json", "ws")
	if strings.Contains(show, secret) {
		t.Errorf("the snapshot record holds the secret")
	}
	if !strings.Contains(show, `"path": ".npmrc"`) || !strings.Contains(show, "API_TOKEN") {
		t.Errorf("the record does not list the excluded secret file and variable:\n%s", show)
	}
}

// TestRun_Persist: a persisted path survives turns and forks.
func TestRun_Persist(t *testing.T) {
	in := newInstance(t)
	t.Cleanup(func() { in.cleanupMount("ws", in.record("ws").dirOrEmpty()) })
	r := in.run("run", "ws", "--persist", "/usr/local/lib", "--", "sh", "-c", "mkdir -p /usr/local/lib/cairn-tool && echo v1 > /usr/local/lib/cairn-tool/version && ls /usr/local/lib")
	if r.code != 0 {
		t.Fatalf("turn 1: exit %d\n%s", r.code, r.stderr)
	}
	r = in.run("run", "ws", "--persist", "/usr/local/lib", "--", "cat", "/usr/local/lib/cairn-tool/version")
	if r.code != 0 || r.stdout != "v1\n" {
		t.Fatalf("turn 2: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// Without --persist the base shows through: the host's /usr/local.
	if r := in.run("run", "ws", "--no-snapshot", "--", "cat", "/usr/local/lib/cairn-tool/version"); r.code == 0 {
		t.Errorf("without --persist the persisted file is visible: %q", r.stdout)
	}
	in.must("fork", "ws", "ws-fork")
	t.Cleanup(func() { in.cleanupMount("ws-fork", in.record("ws-fork").dirOrEmpty()) })
	r = in.run("run", "ws-fork", "--persist", "/usr/local/lib", "--", "sh", "-c", "cat /usr/local/lib/cairn-tool/version; echo v2 > /usr/local/lib/cairn-tool/version")
	if r.code != 0 || r.stdout != "v1\n" {
		t.Fatalf("fork: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := in.must("cat", "ws:.cairn/persist/usr/local/lib/cairn-tool/version"); got != "v1\n" {
		t.Errorf("the fork's change reached the original: %q", got)
	}
}

// TestRun_Limits: a fork bomb is contained by --pids, a memory hog killed
// by --memory, a sleeper by --timeout; nothing survives any of them.
func TestRun_Limits(t *testing.T) {
	in := newInstance(t)
	t.Cleanup(func() { in.cleanupMount("ws", in.record("ws").dirOrEmpty()) })
	r := in.run("run", "ws", "--no-snapshot", "--pids", "64", "--timeout", "20s", "--", "sh", "-c",
		`bomb() { bomb | bomb & }; bomb; sleep 2; echo survived`)
	if r.code == 124 {
		t.Errorf("fork bomb: the timeout had to kill it (exit 124); --pids did not contain it")
	}
	r = in.run("run", "ws", "--no-snapshot", "--memory", "64M", "--", "sh", "-c", `x=a; while true; do x="$x$x"; done`)
	if r.code != 137 {
		t.Errorf("memory hog: exit %d, want 137 (killed)\nstderr: %s", r.code, r.stderr)
	}
	r = in.run("run", "ws", "--memory", "64M", "-m", "hog", "--", "sh", "-c", `x=a; while true; do x="$x$x"; done`)
	if show := in.must("show", "--json", "ws"); !strings.Contains(show, `"run.oom_killed": "true"`) {
		t.Errorf("the record does not say the OOM killer ran:\n%s", show)
	}
	r = in.run("run", "ws", "--no-snapshot", "--timeout", "1s", "--", "sh", "-c", "(setsid sleep 1000 &); sleep 1000")
	if r.code != 124 {
		t.Errorf("timeout: exit %d, want 124", r.code)
	}
	out, _ := exec.Command("pgrep", "-f", "sleep 1000").Output()
	if len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("processes survived the timeout: %s", out)
	}
	in.noStrays()
}

// TestRun_BadInput: bad flags get a usage error and run nothing.
func TestRun_BadInput(t *testing.T) {
	in := newInstance(t)
	for _, args := range [][]string{
		{"run", "ws"},
		{"run", "ws", "--"},
		{"run", "ws", "--memory", "lots", "--", "true"},
		{"run", "ws", "--secret-env", "X", "--", "true"},
		{"run", "ws", "--persist", "relative/path", "--", "true"},
		{"run", "ws", "--pids", "3", "--", "true"},
		{"run", "bad/name", "--", "true"},
	} {
		r := in.run(args...)
		if r.code != 2 {
			t.Errorf("cairn %s: exit %d, want 2 (usage)\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if rec := in.record("ws"); rec != nil {
		in.cleanupMount("ws", rec.Dir)
	}
}

func (r *record) dirOrEmpty() string {
	if r == nil {
		return ""
	}
	return r.Dir
}

// runCgroupPrefix starts the cgroup name of every run of this instance's
// state directory: cairn-run-TAG-, TAG the first 8 hex digits of the
// SHA-256 of its path (cmd/cairn's runTag).
func (in *instance) runCgroupPrefix() string {
	h := sha256.Sum256([]byte(in.home))
	return "cairn-run-" + hex.EncodeToString(h[:4]) + "-"
}
