package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/internal/s3fault"
	"github.com/cairnfs/cairn/internal/testenv"
)

var (
	multiSteps = flag.Int("history.multi.steps", 50, "steps of the multi-machine torture test (make torture runs 2000)")
	multiSeed  = flag.Uint64("history.multi.seed", 1, "seed of the multi-machine torture test (printed on failure)")
	multiSkip  = flag.String("history.multi.skip", "", "comma-separated operations the multi-machine torture test leaves out (e.g. rollback,lease-loss), to look past one known failure")
	multiHomes = flag.Int("history.multi.homes", 3, "machines (state directories) of the multi-machine torture test")
)

// leaseTTL is the lease TTL the daemons of the multi-machine test run
// with; another machine may take an unrenewed lease over leaseGrace later
// (chunkstore.LeaseGrace, which the binary does not let a test shorten).
const (
	leaseTTL   = 2 * time.Second
	leaseGrace = 10 * time.Second
)

// TestHistory_MultiMachine is the model-checked multi-machine torture test:
// several machines (state directories) share one store and, at random,
// mount, write, snapshot online and offline, unmount, are killed (also in
// the middle of a snapshot), lose their lease to another machine's
// --force, fork, roll back, and (on S3) lose the store for a while. After
// every step it checks the store and the mounts against a model:
//
//   - every mounted directory is exactly its machine's model of the tree;
//   - the history is a chain (each log record's parent is the next one);
//   - every acknowledged snapshot (exit 0) is reachable from its
//     workspace's head, listed as a lost compare-and-swap with its fork
//     command, discarded on purpose by a rollback the test made, or (S3)
//     still queued on the machine that made it;
//   - every snapshot the test knows reads back exactly (a sample each step,
//     all at the end);
//   - every command exits as the contract allows for that step.
//
// Seeds are fixed (-history.multi.seed) and printed on failure with the
// command that replays the run.
func TestHistory_MultiMachine(t *testing.T) {
	t.Run("Local", func(t *testing.T) {
		testenv.NeedRoot(t, "FUSE mounts", true)
		store := filepath.Join(shortTempDir(t), "store")
		runMultiTorture(t, store, nil, nil)
	})
	t.Run("S3", func(t *testing.T) {
		srv := s3test.Start(t)
		proxy := s3fault.Start(t, srv.Endpoint)
		testenv.NeedRoot(t, "FUSE mounts", true)
		bucket := srv.NewBucket(t)
		store := "s3://" + bucket + "/ws?endpoint=" + proxy.URL() + "&region=" + srv.Region
		runMultiTorture(t, store, []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
			"CAIRN_CACHE_SIZE=64M"}, proxy)
	})
}

// homeFSSize is the size of each machine's state directory, a tmpfs of its
// own, so that the test can fill it.
const homeFSSize = 1 << 30

// newMachine is a state directory on a tmpfs of its own over store. Its
// cleanups unmount everything it mounted, then the tmpfs.
func newMachine(t *testing.T, store string, extra []string) *instance {
	home := shortTempDir(t)
	if err := syscall.Mount("tmpfs", home, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", homeFSSize)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", home, err)
	}
	t.Cleanup(func() { syscall.Unmount(home, syscall.MNT_DETACH) })
	in := &instance{t: t, home: home, store: store,
		extra: append([]string{"CAIRN_LEASE_TTL=" + leaseTTL.String()}, extra...)}
	t.Cleanup(in.unmountAll)
	return in
}

// Tri-state knowledge of a journal's unsnapshotted changes.
const (
	clean = iota
	dirty
	maybeDirty // a kill in the middle of a snapshot: it may have committed
)

// mwork is one machine's view of one workspace: its journal and its mount.
type mwork struct {
	journal bool              // the machine has a journal of the workspace
	live    map[string]string // the journal's tree: path -> content
	state   int               // clean, dirty, maybeDirty
	bases   map[string]bool   // snapshots the journal may be based on ("" none)
	dir     string            // mount point (kept across mounts)
	mounted bool
	pid     int
	stopped bool // SIGSTOPped by the test
	cleanup bool // its mount point's cleanup is registered
	ro      bool // lost its lease: the mount must be read-only
}

// mhome is one machine.
type mhome struct {
	idx int
	in  *instance
	ws  map[string]*mwork
}

// msnap is a snapshot the test knows.
type msnap struct {
	ws        string
	tree      map[string]string
	acked     bool              // a command exited 0 naming it: it must never be dropped
	home      int               // the machine that made it
	discarded bool              // a rollback the test made dropped it on purpose
	verified  bool              // read back exactly
	inStore   bool              // seen in a log or a lost list
	alt       map[string]string // another tree it may have (nil: none)
	parent    string
	parentOK  bool
}

// candidate is a snapshot whose outcome is unknown (its machine was killed
// while it ran): if it shows up it must have this tree.
type candidate struct {
	ws   string
	home int
	tree map[string]string
}

type multiTorture struct {
	t       *testing.T
	rng     *rand.Rand
	proxy   *s3fault.Proxy
	homes   []*mhome
	wss     []string
	snaps   map[string]*msnap
	cands   []candidate
	steps   []string
	step    int
	current string // the operation of the step
	s3down  int    // steps S3 has been down; 0 up
	leased  int    // lease-loss ops done
	ops     map[string]int
	logs    map[string][]string // workspace -> its log (IDs, newest first), from the last check
	lost    map[string]map[string]string
	// badgerDeaths counts daemons that died of the known limit of a full
	// disk (badgerFault).
	badgerDeaths int
}

func runMultiTorture(t *testing.T, store string, extra []string, proxy *s3fault.Proxy) {
	m := &multiTorture{t: t, rng: rand.New(rand.NewPCG(*multiSeed, 15)), proxy: proxy,
		snaps: map[string]*msnap{}, ops: map[string]int{}, logs: map[string][]string{},
		lost: map[string]map[string]string{}}
	for i := range *multiHomes {
		m.homes = append(m.homes, &mhome{idx: i, in: newMachine(t, store, extra), ws: map[string]*mwork{}})
	}
	if proxy != nil {
		t.Cleanup(func() { proxy.SetDown(false) }) // runs before the unmounts: they need S3
	}
	m.homes[0].in.must("init")
	// Runs before the instances' cleanups: a stopped daemon cannot unmount.
	t.Cleanup(func() {
		for _, h := range m.homes {
			for _, w := range h.ws {
				if w.stopped {
					syscall.Kill(w.pid, syscall.SIGCONT)
				}
			}
		}
	})
	m.wss = []string{"w0"}
	for m.step = 0; m.step < *multiSteps; m.step++ {
		m.doStep()
		m.check(false)
	}
	if m.s3down > 0 {
		m.setS3(false)
	}
	// The end: every machine unmounts (waiting for its uploads), then
	// every known snapshot must read back exactly.
	for _, h := range m.homes {
		for _, name := range sortedKeys(h.ws) {
			if w := h.ws[name]; w.mounted {
				m.unmount(h, name, w, false)
			}
		}
	}
	m.check(true)
	if testing.Verbose() && len(m.steps) <= 200 {
		t.Logf("steps:\n  %s", strings.Join(m.steps, "\n  "))
	}
	var used []string
	for _, h := range m.homes {
		var st syscall.Statfs_t
		if syscall.Statfs(h.in.home, &st) == nil {
			used = append(used, fmt.Sprintf("%d MiB", (st.Blocks-st.Bfree)*uint64(st.Bsize)>>20))
		}
	}
	t.Logf("state directories in use at the end: %s (of %d MiB each)", strings.Join(used, ", "), homeFSSize>>20)
	t.Logf("seed %d: %d steps over %d machines, %d workspaces, %d snapshots known: %v",
		*multiSeed, *multiSteps, len(m.homes), len(m.wss), len(m.snaps), m.ops)
	if m.badgerDeaths > 0 {
		t.Logf("KNOWN LIMIT: %d daemons died of SIGBUS in Badger's table writes on a full disk (README, durability contract); nothing they had acknowledged was lost", m.badgerDeaths)
	}
}

// fail stops the test with the seed, the command that replays it, the last
// steps and the daemons' logs.
func (m *multiTorture) fail(format string, args ...any) {
	m.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "step %d (%s): %s\n\n", m.step, m.current, fmt.Sprintf(format, args...))
	fmt.Fprintf(&b, "seed %d; replay: go test ./integration -count=1 -run '^%s$' -history.multi.seed=%d -history.multi.steps=%d -history.multi.homes=%d -history.multi.skip=%q\n",
		*multiSeed, m.t.Name(), *multiSeed, *multiSteps, len(m.homes), *multiSkip)
	fmt.Fprintf(&b, "last steps:\n  %s\n", strings.Join(m.steps[max(0, len(m.steps)-20):], "\n  "))
	for _, h := range m.homes {
		for _, name := range sortedKeys(h.ws) {
			log, err := os.ReadFile(filepath.Join(h.in.home, "workspaces", name, "daemon.log"))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
			from, to := max(0, len(lines)-25), len(lines)
			// A daemon that crashed: from the log line before the crash
			// through the faulting goroutine's stack.
			for i, l := range lines {
				if strings.HasPrefix(l, "fatal error") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "unexpected fault") {
					from, to = max(0, i-2), min(len(lines), i+60)
					break
				}
			}
			fmt.Fprintf(&b, "--- machine %d, %s, daemon.log (lines %d-%d of %d):\n%s\n", h.idx, name,
				from+1, to, len(lines), strings.Join(lines[from:to], "\n"))
		}
	}
	m.t.Fatal(b.String())
}

func (m *multiTorture) logStep(format string, args ...any) {
	m.steps = append(m.steps, fmt.Sprintf("%d: ", m.step)+fmt.Sprintf(format, args...))
}

// run runs the binary on machine h, with a timeout: a hung command is a
// failure, not a hung test.
func (m *multiTorture) run(h *mhome, args ...string) result {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cairnBin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.in.home, "AWS_EC2_METADATA_DISABLED=true"}, h.in.env()...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		m.fail("machine %d: cairn %s: timed out\nstderr: %s", h.idx, strings.Join(args, " "), r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		m.fail("machine %d: cairn %s: %v", h.idx, strings.Join(args, " "), err)
	}
	return r
}

// expect fails unless r exited with one of codes.
func (m *multiTorture) expect(h *mhome, what string, r result, codes ...int) {
	m.t.Helper()
	if !slices.Contains(codes, r.code) {
		m.fail("machine %d: %s: exit %d, the contract allows %v here\nstdout: %s\nstderr: %s", h.idx, what, r.code, codes, r.stdout, r.stderr)
	}
}

func (m *multiTorture) work(h *mhome, ws string) *mwork {
	w := h.ws[ws]
	if w == nil {
		w = &mwork{live: map[string]string{}, bases: map[string]bool{}}
		h.ws[ws] = w
	}
	return w
}

func (m *multiTorture) setS3(down bool) {
	m.proxy.SetDown(down)
	if down {
		m.s3down = 1
	} else {
		m.s3down = 0
	}
}

// holder is the machine whose mount holds ws's lease in the model (a live,
// running daemon that did not lose it), or nil.
func (m *multiTorture) holder(ws string) *mhome {
	for _, h := range m.homes {
		if w := h.ws[ws]; w != nil && w.mounted && !w.stopped && !w.ro {
			return h
		}
	}
	return nil
}

func (m *multiTorture) doStep() {
	h := m.homes[m.rng.IntN(len(m.homes))]
	ws := m.wss[m.rng.IntN(len(m.wss))]
	// Bias: mostly work where a workspace is mounted (writes, snapshots,
	// unmounts), else often where a journal waits (divergence, rebase).
	var mounted, journals [][2]int
	for hi, o := range m.homes {
		for wi, name := range m.wss {
			if ow := o.ws[name]; ow != nil && ow.mounted {
				mounted = append(mounted, [2]int{hi, wi})
			} else if ow != nil && ow.journal {
				journals = append(journals, [2]int{hi, wi})
			}
		}
	}
	switch n := m.rng.IntN(10); {
	case n < 6 && len(mounted) > 0:
		p := mounted[m.rng.IntN(len(mounted))]
		h, ws = m.homes[p[0]], m.wss[p[1]]
	case n < 8 && len(journals) > 0:
		p := journals[m.rng.IntN(len(journals))]
		h, ws = m.homes[p[0]], m.wss[p[1]]
	}
	if hold := m.holder(ws); hold != nil && hold != h && m.rng.IntN(10) < 7 {
		h = hold // a refused mount now and then is enough: hand over more often
	}
	w := m.work(h, ws)
	type op struct {
		weight int
		name   string
		do     func()
	}
	var ops []op
	add := func(weight int, name string, do func()) {
		if !slices.Contains(strings.Split(*multiSkip, ","), name) {
			ops = append(ops, op{weight, name, do})
		}
	}
	down := m.s3down > 0
	switch {
	case w.mounted && w.ro:
		add(1, "write-ro", func() { m.writesReadOnly(h, ws, w) })
		add(1, "snapshot-ro", func() { m.snapshotReadOnly(h, ws, w) })
		add(3, "unmount", func() { m.unmount(h, ws, w, down) })
	case w.mounted:
		add(8, "write", func() { m.writes(h, ws, w) })
		add(4, "snapshot", func() { m.snapshotOnline(h, ws, w) })
		add(5, "unmount", func() { m.unmount(h, ws, w, down) })
		add(1, "kill", func() { m.kill(h, ws, w, false) })
		add(1, "kill-mid-snapshot", func() { m.kill(h, ws, w, true) })
		add(1, "disk-full", func() { m.diskFull(h, ws, w) })
		if !down {
			add(1, "rollback", func() { m.rollback(h, ws, w, "") })
			if len(m.wss) < 2 {
				add(1, "fork", func() { m.fork(h, "") })
			}
			if len(m.homes) > 1 && m.leased < max(1, *multiSteps/100) { // each takes the TTL and the grace: 13 s
				add(1, "lease-loss", func() { m.leaseLoss(h, ws, w) })
			}
		}
	case !down:
		add(8, "mount", func() { m.mount(h, ws, w) })
		if m.proxy == nil || !m.outboxBusy(h, ws) { // with a queue the head it meets is not known here
			add(2, "offline-snapshot", func() { m.snapshotOffline(h, ws, w) })
		}
		add(1, "rollback", func() { m.rollback(h, ws, w, "") })
		if len(m.wss) < 2 {
			add(1, "fork", func() { m.fork(h, "") })
		}
	}
	if m.proxy != nil {
		if down {
			add(2, "s3-up", func() { m.setS3(false); m.logStep("S3 back") })
		} else {
			add(1, "s3-down", func() { m.setS3(true); m.logStep("S3 down") })
		}
	}
	if down && m.s3down >= 4 {
		ops = []op{{1, "s3-up", func() { m.setS3(false); m.logStep("S3 back") }}}
	}
	if len(ops) == 0 {
		m.logStep("machine %d %s: nothing to do (S3 down)", h.idx, ws)
		m.s3down++
		return
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := m.rng.IntN(total)
	for _, o := range ops {
		if n < o.weight {
			m.ops[o.name]++
			m.current = fmt.Sprintf("machine %d %s: %s", h.idx, ws, o.name)
			o.do()
			break
		}
		n -= o.weight
	}
	if m.s3down > 0 {
		m.s3down++
	}
}

// writes creates, overwrites, appends to and deletes a few small files
// through machine h's mount.
func (m *multiTorture) writes(h *mhome, ws string, w *mwork) {
	var did []string
	for range 1 + m.rng.IntN(5) {
		name := fmt.Sprintf("d%d/f%d", m.rng.IntN(3), m.rng.IntN(6))
		p := filepath.Join(w.dir, name)
		if _, exists := w.live[name]; exists && m.rng.IntN(4) == 0 {
			if err := os.Remove(p); err != nil {
				m.fail("machine %d %s: rm %s: %v", h.idx, ws, name, err)
			}
			delete(w.live, name)
			did = append(did, "rm "+name)
			continue
		}
		data := fmt.Sprintf("m%d %s step %d %x\n", h.idx, ws, m.step, m.rng.Uint64())
		if old, ok := w.live[name]; ok && m.rng.IntN(2) == 0 {
			data = old + data
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			m.fail("machine %d %s: write %s: %v", h.idx, ws, name, err)
		}
		w.live[name] = data
		did = append(did, "write "+name)
	}
	w.state = dirty
	m.logStep("machine %d %s: %s", h.idx, ws, strings.Join(did, ", "))
}

// writesReadOnly: a mount that lost its lease refuses writes with EROFS.
func (m *multiTorture) writesReadOnly(h *mhome, ws string, w *mwork) {
	err := os.WriteFile(filepath.Join(w.dir, "ro-probe"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		m.fail("machine %d %s: a write to a mount that lost its lease: %v, want EROFS", h.idx, ws, err)
	}
	m.logStep("machine %d %s: write refused (EROFS, lease lost)", h.idx, ws)
}

func (m *multiTorture) snapshotReadOnly(h *mhome, ws string, w *mwork) {
	head := ""
	if m.s3down == 0 {
		head = m.head(h, ws)
	}
	r := m.run(h, "snapshot", ws)
	m.expect(h, "snapshot of a mount that lost its lease", r, 4)
	if got := head; m.s3down == 0 {
		if got = m.head(h, ws); got != head {
			m.fail("machine %d %s: a refused snapshot moved the head from %.12s to %.12s", h.idx, ws, head, got)
		}
	}
	m.logStep("machine %d %s: snapshot refused (lease lost)", h.idx, ws)
}

var idRE = regexp.MustCompile(`\b[0-9a-f]{64}\b`)

// snapshotOnline snapshots a mounted workspace.
func (m *multiTorture) snapshotOnline(h *mhome, ws string, w *mwork) {
	args := []string{"snapshot", ws, "-m", fmt.Sprintf("step %d", m.step)}
	if m.proxy != nil && m.s3down == 0 && m.rng.IntN(3) == 0 {
		args = append(args, "--wait")
	}
	r := m.run(h, args...)
	id := strings.TrimSpace(r.stdout)
	if r.code == 4 && len(args) == 5 && idRE.MatchString(id) && strings.Contains(r.stderr, "cairn fork") {
		// S3 --wait: committed here, uploaded, but the ref move lost (a
		// queue of a machine that lost its lease moved it first): not
		// acknowledged, but kept and reported.
		m.snaps[id] = &msnap{ws: ws, tree: maps.Clone(w.live), home: h.idx}
		w.state, w.bases = clean, map[string]bool{id: true}
		m.logStep("machine %d %s: snapshot --wait %.12s lost its ref move", h.idx, ws, id)
		return
	}
	m.expect(h, strings.Join(args, " "), r, 0)
	if !idRE.MatchString(id) {
		m.fail("machine %d: %s printed %q, not a snapshot ID", h.idx, strings.Join(args, " "), r.stdout)
	}
	m.acked(h, ws, w, id)
	m.logStep("machine %d %s: snapshot %.12s", h.idx, ws, id)
}

// acked records an acknowledged snapshot of machine h's journal.
func (m *multiTorture) acked(h *mhome, ws string, w *mwork, id string) {
	if s, ok := m.snaps[id]; ok && !maps.Equal(s.tree, w.live) {
		m.fail("machine %d %s: snapshot %.12s acknowledged again with another tree", h.idx, ws, id)
	}
	m.snaps[id] = &msnap{ws: ws, tree: maps.Clone(w.live), acked: true, home: h.idx}
	w.state = clean
	w.bases = map[string]bool{id: true}
	w.journal = true
}

// snapshotOffline snapshots a workspace that is not mounted on h, from its
// journal there.
func (m *multiTorture) snapshotOffline(h *mhome, ws string, w *mwork) {
	before := m.head(h, ws)
	pending := m.proxy != nil && m.outboxBusy(h, ws) // S3: queued snapshots of a stopped daemon
	r := m.run(h, "snapshot", ws, "-m", fmt.Sprintf("offline, step %d", m.step))
	hold := m.holder(ws)
	switch {
	case !w.journal:
		m.expect(h, "offline snapshot with no journal here", r, 3, 4)
		m.logStep("machine %d %s: offline snapshot: no journal here (exit %d)", h.idx, ws, r.code)
		return
	case hold != nil:
		m.expect(h, "offline snapshot while machine "+fmt.Sprint(hold.idx)+" holds the lease", r, 4)
		if !strings.Contains(r.stderr, "held by") {
			m.fail("machine %d %s: offline snapshot refused without naming the lease holder: %s", h.idx, ws, r.stderr)
		}
		if got := m.head(h, ws); got != before {
			m.fail("machine %d %s: a refused offline snapshot moved the head %.12s -> %.12s", h.idx, ws, before, got)
		}
		m.logStep("machine %d %s: offline snapshot refused (leased by machine %d)", h.idx, ws, hold.idx)
		return
	}
	if r.code == 4 && m.leaseRefusal(r) {
		m.deadHolder(h, ws, r)
		m.logStep("machine %d %s: offline snapshot refused: an unexpired lease (%s)", h.idx, ws, firstLine(r.stderr))
		return
	}
	if m.divergence(h, ws, w, before, pending, r, "offline snapshot") {
		return
	}
	m.expect(h, "offline snapshot", r, 0)
	id := strings.TrimSpace(r.stdout)
	if !idRE.MatchString(id) {
		m.fail("machine %d: offline snapshot printed %q", h.idx, r.stdout)
	}
	m.reconciled(h, ws, w, before, "offline snapshot")
	m.acked(h, ws, w, id)
	m.logStep("machine %d %s: offline snapshot %.12s (head was %.12s)", h.idx, ws, id, before)
}

// leaseRefusal reports whether a refusal names a lease (one the model
// cannot rule out: a dead or stopped daemon's lease not yet taken over).
func (m *multiTorture) leaseRefusal(r result) bool {
	return strings.Contains(r.stderr, "held by")
}

var holderPIDRE = regexp.MustCompile(`held by [^(]*\(pid (\d+)`)

// deadHolder checks that a refusal the model does not expect from a live
// lease names a holder that is dead or stopped (its lease not yet expired).
func (m *multiTorture) deadHolder(h *mhome, ws string, r result) {
	sm := holderPIDRE.FindStringSubmatch(r.stderr)
	if sm == nil {
		m.fail("machine %d %s: refused for a lease without naming its holder's pid: %s", h.idx, ws, r.stderr)
	}
	pid, _ := strconv.Atoi(sm[1])
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'T' {
			m.fail("machine %d %s: refused for a lease held by pid %d, which runs, but the model has no mount of %s holding it: %s", h.idx, ws, pid, ws, r.stderr)
		}
	}
}

// reconciled updates the model after a verb opened machine h's journal of
// ws against head (the store's head before the verb) and succeeded: the
// same head continues; a moved head is a rebase, which a journal with
// unsnapshotted changes must never do.
func (m *multiTorture) reconciled(h *mhome, ws string, w *mwork, head, verb string) {
	if head != "" && m.snaps[head] == nil {
		m.resolveUnknown(h, ws, head)
	}
	if !w.journal {
		w.live = m.treeOf(h, ws, head)
		w.state, w.bases, w.journal = clean, map[string]bool{head: true}, true
		return
	}
	if w.bases[head] || head == "" {
		return
	}
	if w.state == dirty {
		m.fail("machine %d %s: %s succeeded, but the head moved (%.12s, the journal is based on %v) and the journal has changes not snapshotted: they must be kept as a snapshot and the verb refused (exit 4)",
			h.idx, ws, verb, head, shortIDs(w.bases))
	}
	w.live = m.treeOf(h, ws, head)
	w.state, w.bases = clean, map[string]bool{head: true}
}

// divergence handles an exit-4 refusal naming local changes L and the head
// H: it checks L holds the journal's tree, that a second try names the same
// L, and resolves it (or not) at random. It reports whether r was one.
func (m *multiTorture) divergence(h *mhome, ws string, w *mwork, head string, pending bool, r result, verb string) bool {
	if r.code != 4 || !strings.Contains(r.stderr, "cairn rollback") {
		return false
	}
	if w.state == clean || !w.journal {
		m.fail("machine %d %s: %s refused as diverged, but the journal has no changes since its snapshot (a rebase onto %.12s was due)\n%s", h.idx, ws, verb, head, r.stderr)
	}
	L, H := m.parseDivergence(h, ws, r.stderr, head)
	if H != head && !pending {
		m.fail("machine %d %s: the divergence names head %.12s, the store's head is %.12s\n%s", h.idx, ws, H, head, r.stderr)
	}
	m.checkTree(h, L, w.live, "the local changes kept as "+L[:12])
	if s := m.snaps[L]; s == nil {
		m.snaps[L] = &msnap{ws: ws, tree: maps.Clone(w.live), home: h.idx, verified: true}
	}
	// The same verb again names the same L.
	var again result
	if verb == "mount" {
		again = m.run(h, "mount", ws, w.dir)
	} else {
		again = m.run(h, "snapshot", ws)
	}
	m.expect(h, verb+" repeated on a diverged journal", again, 4)
	if L2, _ := m.parseDivergence(h, ws, again.stderr, head); L2 != L {
		m.fail("machine %d %s: repeating %s named local changes %.12s, the first time %.12s", h.idx, ws, verb, L2, L)
	}
	m.logStep("machine %d %s: %s refused: diverged, local changes %.12s, head %.12s", h.idx, ws, verb, L, H)
	switch n := m.rng.IntN(10); {
	case n < 4:
		m.rollback(h, ws, w, L)
	case n < 7:
		m.rollback(h, ws, w, H)
	case n < 9 && len(m.wss) < 3:
		m.fork(h, L)
	}
	return true
}

var forkCmdRE = regexp.MustCompile(`cairn fork ([0-9a-f]{8,64})`)
var rollbackCmdRE = regexp.MustCompile(`cairn rollback \S+ ([0-9a-f]{8,64})`)

// parseDivergence finds L and H (full IDs) in a divergence message.
func (m *multiTorture) parseDivergence(h *mhome, ws, msg, head string) (L, H string) {
	f := forkCmdRE.FindStringSubmatch(msg)
	rb := rollbackCmdRE.FindAllStringSubmatch(msg, -1)
	if f == nil || len(rb) < 2 {
		m.fail("machine %d %s: the divergence message does not give `cairn fork L NAME`, `cairn rollback %s L` and `cairn rollback %s H`:\n%s", h.idx, ws, ws, ws, msg)
	}
	L = m.fullID(h, f[1])
	for _, s := range rb {
		id := m.fullID(h, s[1])
		if id != L {
			H = id
		}
	}
	if H == "" {
		H = head // both rollbacks name L: the head is then the missing one
	}
	return L, H
}

func (m *multiTorture) fullID(h *mhome, prefix string) string {
	r := m.run(h, "show", "--json", prefix)
	m.expect(h, "show "+prefix, r, 0)
	return decodeJSON[struct {
		ID string `json:"id"`
	}](m.t, r.stdout).ID
}

// mount mounts ws on machine h.
func (m *multiTorture) mount(h *mhome, ws string, w *mwork) {
	if w.dir == "" {
		w.dir = shortTempDir(m.t)
	}
	m.cleanupOnce(h, ws, w) // before the first try: a mount that should fail may not
	head := m.head(h, ws)
	pending := m.proxy != nil && m.outboxBusy(h, ws)
	args := []string{"mount", ws, w.dir}
	lease := m.storeLease(h, ws)
	hold := m.holder(ws)
	force := false
	if hold == nil && lease != nil && lease.deadHolder && time.Now().After(lease.takeover.Add(time.Second)) {
		force = true // a dead or stopped daemon's expired lease: take it over
		args = []string{"mount", "--force", ws, w.dir}
	}
	r := m.run(h, args...)
	switch {
	case hold != nil:
		m.expect(h, fmt.Sprintf("mount while machine %d holds the lease", hold.idx), r, 4)
		if !strings.Contains(r.stderr, "held by") {
			m.fail("machine %d %s: mount refused without naming the lease holder: %s", h.idx, ws, r.stderr)
		}
		m.logStep("machine %d %s: mount refused (leased by machine %d)", h.idx, ws, hold.idx)
		return
	case r.code == 4 && m.leaseRefusal(r) && !force:
		m.deadHolder(h, ws, r)
		m.logStep("machine %d %s: mount refused: lease of a dead daemon, not yet expired", h.idx, ws)
		return
	}
	if m.divergence(h, ws, w, head, pending, r, "mount") {
		return
	}
	m.expect(h, strings.Join(args, " "), r, 0)
	w.mounted, w.ro, w.stopped = true, false, false
	st := m.status(h, ws)
	w.pid = st.PID
	if pending {
		// S3, snapshots of this machine queued: the mount uploads them
		// first, then the head is (normally) the last of them.
		for deadline := time.Now().Add(60 * time.Second); m.outboxBusy(h, ws) && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
		}
		head = m.head(h, ws)
		st = m.status(h, ws)
		if head != "" && m.snaps[head] == nil {
			m.resolveUnknown(h, ws, head)
		}
		if !w.bases[head] && w.journal {
			// The queue lost its compare-and-swap to another machine: the
			// contract does not say which tree the mount then shows; it must
			// be the journal's or the head's.
			got := m.mountTree(h, ws, w)
			if !maps.Equal(got, w.live) && !maps.Equal(got, m.snaps[head].tree) {
				m.fail("machine %d %s: mounted after its queued snapshots lost to head %.12s: the tree is neither the journal's nor the head's:\n%s", h.idx, ws, head, treeDiff(w.live, got))
			}
			w.live, w.bases = got, map[string]bool{st.Head: true}
			m.logStep("machine %d %s: mount after a lost queue, at %.12s (head %.12s)", h.idx, ws, st.Head, head)
			return
		}
	}
	if st.Head != head {
		due := map[int]string{clean: "it has no changes since its snapshot: a rebase onto the head was due",
			dirty:      "it has changes not snapshotted: they were due as a snapshot L and the mount refused (exit 4)",
			maybeDirty: "its last snapshot was killed: a rebase or a refusal was due"}[w.state]
		m.fail("machine %d %s: mounted at %.12s, the store's head is %.12s: the mount did not reconcile its journal with the head (%s)", h.idx, ws, st.Head, head, due)
	}
	m.reconciled(h, ws, w, head, "mount")
	m.logStep("machine %d %s: mount%s at head %.12s", h.idx, ws, map[bool]string{true: " --force"}[force], head)
}

// unmount unmounts ws on h (without waiting for uploads while S3 is down).
func (m *multiTorture) unmount(h *mhome, ws string, w *mwork, noWait bool) {
	args := []string{"unmount", ws}
	if noWait {
		args = []string{"unmount", "--no-wait", ws}
	}
	r := m.run(h, args...)
	m.expect(h, strings.Join(args, " "), r, 0)
	w.mounted, w.ro = false, false
	if isMounted(w.dir) {
		m.fail("machine %d %s: still mounted at %s after unmount", h.idx, ws, w.dir)
	}
	m.logStep("machine %d %s: %s", h.idx, ws, strings.Join(args, " "))
}

// kill kills -9 the daemon of ws on h, in the middle of a snapshot of a
// few MB if midSnapshot, and cleans the stale mount up.
func (m *multiTorture) kill(h *mhome, ws string, w *mwork, midSnapshot bool) {
	what := "kill -9"
	if midSnapshot {
		big := make([]byte, 3<<20)
		for i := 0; i < len(big); i += 8 {
			v := m.rng.Uint64()
			for j := range 8 {
				big[i+j] = byte(v >> (8 * j))
			}
		}
		name := fmt.Sprintf("big/b%d", m.rng.IntN(2))
		p := filepath.Join(w.dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, big, 0o644); err != nil {
			m.fail("machine %d %s: write %s: %v", h.idx, ws, name, err)
		}
		w.live[name] = string(big)
		w.state = dirty
		cmd := exec.Command(cairnBin, "snapshot", ws)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.in.home}, h.in.env()...)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			m.fail("start snapshot: %v", err)
		}
		time.Sleep(time.Duration(m.rng.IntN(60)) * time.Millisecond)
		syscall.Kill(w.pid, syscall.SIGKILL)
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		var err error
		select {
		case err = <-waited:
		case <-time.After(time.Minute):
			wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", cmd.Process.Pid))
			stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", cmd.Process.Pid))
			cmd.Process.Kill()
			m.fail("machine %d %s: `cairn snapshot` (pid %d) still runs a minute after its daemon was killed: wchan %s, mounted %v, kernel stack:\n%s",
				h.idx, ws, cmd.Process.Pid, wchan, isMounted(w.dir), stack)
		}
		if id := strings.TrimSpace(out.String()); err == nil && idRE.MatchString(id) {
			m.acked(h, ws, w, id)
			what += fmt.Sprintf(" after snapshot %.12s returned", id)
		} else {
			// Unknown: the snapshot may or may not be in the history.
			m.cands = append(m.cands, candidate{ws: ws, home: h.idx, tree: maps.Clone(w.live)})
			if w.state != clean {
				w.state = maybeDirty
			}
			w.bases["?"] = true
			what += " in the middle of a snapshot (" + strings.TrimSpace(fmt.Sprint(err)) + ")"
		}
	} else {
		syscall.Kill(w.pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(10 * time.Second); (&record{PID: w.pid}).alive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			m.fail("machine %d %s: daemon %d survives kill -9", h.idx, ws, w.pid)
		}
	}
	r := m.run(h, "unmount", "--no-wait", ws)
	m.expect(h, "unmount of a killed daemon's mount", r, 0)
	if isMounted(w.dir) {
		m.fail("machine %d %s: the killed daemon's mount is still there after unmount", h.idx, ws)
	}
	w.mounted = false
	m.logStep("machine %d %s: %s (pid %d), unmount cleaned up", h.idx, ws, what, w.pid)
}

// rollback rolls ws back on h to target (a random snapshot of its log if
// "").
func (m *multiTorture) rollback(h *mhome, ws string, w *mwork, target string) {
	log := m.log(h, ws)
	if target == "" {
		if len(log) == 0 {
			m.logStep("machine %d %s: rollback: no history yet", h.idx, ws)
			return
		}
		target = log[m.rng.IntN(min(len(log), 8))]
	}
	if m.snaps[target] == nil {
		m.resolveUnknown(h, ws, target)
	}
	head := ""
	if len(log) > 0 {
		head = log[0]
	}
	before := m.reachable(h, ws, log)
	for id, s := range m.snaps {
		if s.ws == ws && s.home == h.idx && s.acked && !s.inStore {
			before[id] = true // S3: queued here, not uploaded yet: the rollback discards it too
		}
	}
	hold := m.holder(ws)
	r := m.run(h, "rollback", "--json", ws, target)
	if hold != nil && hold != h {
		m.expect(h, fmt.Sprintf("rollback while machine %d holds the lease", hold.idx), r, 4)
		m.logStep("machine %d %s: rollback refused (leased by machine %d)", h.idx, ws, hold.idx)
		return
	}
	if r.code == 4 && m.leaseRefusal(r) && hold == nil {
		m.deadHolder(h, ws, r)
		m.logStep("machine %d %s: rollback refused: a dead daemon's lease", h.idx, ws)
		return
	}
	if r.code == 4 && strings.Contains(r.stderr, "cairn rollback") && w.journal && w.state != clean && !w.mounted {
		// A diverged journal: only its L and H are sure to be accepted.
		L, H := m.parseDivergence(h, ws, r.stderr, head)
		if target == L || target == H {
			m.fail("machine %d %s: rollback to %.12s refused, though the divergence names it\n%s", h.idx, ws, target, r.stderr)
		}
		m.logStep("machine %d %s: rollback to %.12s refused: diverged (L %.12s, H %.12s)", h.idx, ws, target, L, H)
		return
	}
	m.expect(h, "rollback to "+target[:12], r, 0)
	rb := decodeJSON[struct {
		To        string `json:"to"`
		Discarded string `json:"discarded"`
	}](m.t, r.stdout)
	if rb.Discarded != "" {
		if _, ok := m.snaps[rb.Discarded]; !ok {
			// The state a rollback discards: this machine's journal, or
			// (no journal here, or a diverged one) the head's tree.
			d := &msnap{ws: ws, tree: maps.Clone(w.live), home: h.idx}
			if head != "" {
				d.alt = m.treeOf(h, ws, head)
			}
			if !w.journal {
				d.tree = d.alt
			}
			m.snaps[rb.Discarded] = d
		}
	}
	w.live = maps.Clone(m.snaps[target].tree)
	// A rollback without a journal here only moves the ref: it makes none.
	w.state, w.bases = clean, map[string]bool{target: true}
	after := m.log(h, ws)
	for deadline := time.Now().Add(30 * time.Second); m.proxy != nil && (len(after) == 0 || after[0] != target) && m.outboxBusy(h, ws) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond) // S3: the ref moves once the outbox drains
		after = m.log(h, ws)
	}
	if len(after) == 0 || after[0] != target {
		m.fail("machine %d %s: after rollback to %.12s the head is %v", h.idx, ws, target, shortIDs(keysOf(after[:min(1, len(after))])))
	}
	if w.mounted {
		if st := m.status(h, ws); st.Head != target {
			m.fail("machine %d %s: after rollback to %.12s the mount is at %.12s", h.idx, ws, target, st.Head)
		}
	}
	// What the rollback made unreachable, it dropped on purpose.
	now := m.reachable(h, ws, after)
	for id := range before {
		if !now[id] && m.snaps[id] != nil {
			m.snaps[id].discarded = true
		}
	}
	m.logStep("machine %d %s: rollback to %.12s (discarded state %.12s)", h.idx, ws, target, rb.Discarded)
}

// fork makes a new workspace at from (a random known snapshot in the
// store if "").
func (m *multiTorture) fork(h *mhome, from string) {
	if len(m.wss) >= 3 {
		m.logStep("machine %d: fork: enough workspaces", h.idx)
		return
	}
	if from == "" {
		var ids []string
		for _, id := range sortedKeys(m.snaps) {
			if m.snaps[id].inStore {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			m.logStep("machine %d: fork: nothing in the store yet", h.idx)
			return
		}
		from = ids[m.rng.IntN(len(ids))]
	}
	name := fmt.Sprintf("w%d", len(m.wss))
	r := m.run(h, "fork", from, name)
	m.expect(h, "fork "+from[:12], r, 0)
	m.wss = append(m.wss, name)
	if head := m.head(h, name); head != from {
		m.fail("machine %d: fork %.12s %s: head %.12s", h.idx, from, name, head)
	}
	m.logStep("machine %d: fork %.12s %s", h.idx, from, name)
}

// leaseLoss stops h's daemon past its lease, lets another machine take the
// workspace over with --force, and continues h: its mount must stay,
// read-only, with the lease "lost".
func (m *multiTorture) leaseLoss(h *mhome, ws string, w *mwork) {
	var g *mhome
	for _, i := range m.rng.Perm(len(m.homes)) {
		o := m.homes[i]
		if ow := o.ws[ws]; o != h && (ow == nil || !ow.mounted && (!ow.journal || ow.state == clean)) {
			g = o
			break
		}
	}
	if g == nil {
		m.logStep("machine %d %s: lease loss: no other machine can take over cleanly", h.idx, ws)
		return
	}
	m.leased++
	st := m.status(h, ws)
	if st.Lease.Expires.IsZero() {
		m.fail("machine %d %s: status shows no lease expiry: %+v", h.idx, ws, st)
	}
	if err := syscall.Kill(w.pid, syscall.SIGSTOP); err != nil {
		m.fail("SIGSTOP %d: %v", w.pid, err)
	}
	w.stopped = true
	// A renewal may have slipped in after the status: one TTL more.
	time.Sleep(time.Until(st.Lease.Expires.Add(leaseTTL + leaseGrace + 1500*time.Millisecond)))
	gw := m.work(g, ws)
	if gw.dir == "" {
		gw.dir = shortTempDir(m.t)
	}
	m.cleanupOnce(g, ws, gw)
	head := m.head(g, ws)
	r := m.run(g, "mount", "--force", ws, gw.dir)
	m.expect(g, "mount --force of a stopped daemon's expired lease", r, 0)
	gw.mounted, gw.ro, gw.stopped = true, false, false
	gw.pid = m.status(g, ws).PID
	m.reconciled(g, ws, gw, head, "mount --force")
	syscall.Kill(w.pid, syscall.SIGCONT)
	w.stopped = false
	// The first daemon finds out at its next renewal.
	for deadline := time.Now().Add(4*leaseTTL + 20*time.Second); ; time.Sleep(200 * time.Millisecond) {
		if !(&record{PID: w.pid}).alive() || !isMounted(w.dir) {
			m.fail("machine %d %s: the daemon that lost its lease is gone or unmounted itself (alive %v, mounted %v): it must keep its mount, read-only",
				h.idx, ws, (&record{PID: w.pid}).alive(), isMounted(w.dir))
		}
		r := m.run(h, "status", "--json", ws)
		if r.code == 0 {
			if sts := decodeJSON[[]statusJSON](m.t, r.stdout); len(sts) == 1 {
				st = sts[0]
				if st.Lease.State == "lost" {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			m.fail("machine %d %s: status never showed the lease lost after machine %d took it over: %+v (exit %d, %s)", h.idx, ws, g.idx, st, r.code, r.stderr)
		}
	}
	if !st.ReadOnly {
		m.fail("machine %d %s: lease lost, but status does not say read_only: %+v", h.idx, ws, st)
	}
	w.ro = true
	m.logStep("machine %d %s: stopped past its lease; machine %d took over with --force at head %.12s; machine %d is read-only", h.idx, ws, g.idx, head, h.idx)
	m.writesReadOnly(h, ws, w)
	m.snapshotReadOnly(h, ws, w)
}

type statusJSON struct {
	PID      int    `json:"pid"`
	Head     string `json:"head"`
	State    string `json:"state"`
	ReadOnly bool   `json:"read_only"`
	Lease    struct {
		State   string    `json:"state"`
		Expires time.Time `json:"expires"`
	} `json:"lease"`
}

func (m *multiTorture) status(h *mhome, ws string) statusJSON {
	r := m.run(h, "status", "--json", ws)
	m.expect(h, "status "+ws, r, 0)
	sts := decodeJSON[[]statusJSON](m.t, r.stdout)
	if len(sts) != 1 {
		m.fail("machine %d: status %s: %s", h.idx, ws, r.stdout)
	}
	return sts[0]
}

type leaseView struct {
	takeover   time.Time // expiry + grace
	deadHolder bool      // its pid is gone or stopped
}

type workspaceJSON struct {
	Name  string `json:"name"`
	Head  string `json:"head"`
	Lease *struct {
		Holder struct {
			PID int `json:"pid"`
		} `json:"holder"`
		Expires time.Time `json:"expires"`
	} `json:"lease"`
	Lost []struct {
		Snapshot string `json:"snapshot"`
		Fork     string `json:"fork"`
	} `json:"lost"`
}

func (m *multiTorture) workspaces(h *mhome) map[string]workspaceJSON {
	r := m.run(h, "workspaces", "--json")
	m.expect(h, "workspaces --json", r, 0)
	out := map[string]workspaceJSON{}
	for _, w := range decodeJSON[[]workspaceJSON](m.t, r.stdout) {
		out[w.Name] = w
	}
	return out
}

// storeLease is ws's lease as the store has it, or nil.
func (m *multiTorture) storeLease(h *mhome, ws string) *leaseView {
	w, ok := m.workspaces(h)[ws]
	if !ok || w.Lease == nil {
		return nil
	}
	dead := !(&record{PID: w.Lease.Holder.PID}).alive()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.Lease.Holder.PID)); err == nil {
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == 'T' {
			dead = true
		}
	}
	return &leaseView{takeover: w.Lease.Expires.Add(leaseGrace), deadHolder: dead}
}

// log is ws's history from its head (IDs, newest first).
func (m *multiTorture) log(h *mhome, ws string) []string {
	r := m.run(h, "log", "--json", ws)
	if r.code == 3 {
		return nil // no head yet
	}
	m.expect(h, "log "+ws, r, 0)
	var ids []string
	for _, e := range decodeJSON[[]struct {
		ID string `json:"id"`
	}](m.t, r.stdout) {
		ids = append(ids, e.ID)
	}
	return ids
}

func (m *multiTorture) head(h *mhome, ws string) string {
	r := m.run(h, "log", "--json", "-n", "1", ws)
	if r.code == 3 {
		return ""
	}
	m.expect(h, "log -n 1 "+ws, r, 0)
	l := decodeJSON[[]struct {
		ID string `json:"id"`
	}](m.t, r.stdout)
	if len(l) == 0 {
		return ""
	}
	return l[0].ID
}

func (m *multiTorture) reachable(h *mhome, ws string, log []string) map[string]bool {
	out := map[string]bool{}
	for _, id := range log {
		out[id] = true
	}
	return out
}

// treeOf is the model's tree of snapshot id (the empty tree for "").
func (m *multiTorture) treeOf(h *mhome, ws, id string) map[string]string {
	if id == "" {
		return map[string]string{}
	}
	if m.snaps[id] == nil {
		m.resolveUnknown(h, ws, id)
	}
	return maps.Clone(m.snaps[id].tree)
}

// resolveUnknown accounts for a snapshot the test did not see made: it
// must be one whose outcome was unknown (a killed snapshot), with its tree.
func (m *multiTorture) resolveUnknown(h *mhome, ws, id string) {
	got := m.export(h, id)
	for i, c := range m.cands {
		if maps.Equal(c.tree, got) {
			m.snaps[id] = &msnap{ws: c.ws, tree: got, home: c.home, verified: true, inStore: true}
			if cw := m.homes[c.home].ws[c.ws]; cw != nil && cw.bases["?"] {
				cw.bases[id] = true
			}
			m.cands = slices.Delete(m.cands, i, i+1)
			m.logStep("  snapshot %.12s of a killed daemon's snapshot (machine %d) is in the store", id, c.home)
			return
		}
	}
	m.fail("snapshot %.12s (of %s) is in the store, but the test never saw it made, and it matches no killed snapshot (%d files)", id, ws, len(got))
}

// export reads snapshot id back as a tree of files.
func (m *multiTorture) export(h *mhome, id string) map[string]string {
	r := m.run(h, "export", id)
	m.expect(h, "export "+id[:12], r, 0)
	tr := tar.NewReader(strings.NewReader(r.stdout))
	out := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			m.fail("export %.12s: %v", id, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			m.fail("export %.12s: %s: %v", id, hdr.Name, err)
		}
		out[strings.TrimPrefix(hdr.Name, "./")] = string(b)
	}
}

// checkTree checks snapshot id reads back as want.
func (m *multiTorture) checkTree(h *mhome, id string, want map[string]string, what string) {
	got := m.export(h, id)
	if d := treeDiff(want, got); d != "" {
		m.fail("%s (snapshot %.12s) does not read back exactly:\n%s", what, id, d)
	}
}

func treeDiff(want, got map[string]string) string {
	var diffs []string
	for _, k := range sortedKeys(want) {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("  %s: missing (want %d bytes)", k, len(want[k])))
		} else if g != want[k] {
			diffs = append(diffs, fmt.Sprintf("  %s: got %.60q, want %.60q", k, g, want[k]))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("  %s: unexpected (%.60q)", k, got[k]))
		}
	}
	return strings.Join(diffs, "\n")
}

// outboxBusy reports whether h has snapshots of ws queued for upload.
func (m *multiTorture) outboxBusy(h *mhome, ws string) bool {
	ents, _ := os.ReadDir(filepath.Join(h.in.home, "workspaces", ws, "outbox", "q"))
	return len(ents) > 0
}

// check compares everything with the model: the mounts, the history and
// every acknowledged snapshot. At the end (final) it reads every known
// snapshot back.
func (m *multiTorture) check(final bool) {
	m.t.Helper()
	for _, h := range m.homes {
		for _, name := range sortedKeys(h.ws) {
			w := h.ws[name]
			if !w.mounted || w.stopped {
				continue
			}
			got := m.mountTree(h, name, w)
			if d := treeDiff(w.live, got); d != "" {
				m.fail("machine %d %s: the mount differs from the model:\n%s", h.idx, name, d)
			}
		}
	}
	if m.s3down > 0 {
		return // the store is out of reach: the history waits for S3
	}
	h := m.homes[m.rng.IntN(len(m.homes))]
	wsj := m.workspaces(h)
	for _, ws := range m.wss {
		log := m.log(h, ws)
		m.logs[ws] = log
		reach := m.reachable(h, ws, log)
		for i, id := range log {
			if m.snaps[id] == nil {
				m.resolveUnknown(h, ws, id)
			}
			s := m.snaps[id]
			s.inStore = true
			if !s.parentOK {
				r := m.run(h, "show", "--json", id)
				m.expect(h, "show "+id[:12], r, 0)
				rec := decodeJSON[struct {
					Parents []string `json:"parents"`
				}](m.t, r.stdout)
				if len(rec.Parents) > 0 {
					s.parent = rec.Parents[0]
				}
				s.parentOK = true
			}
			next := ""
			if i+1 < len(log) {
				next = log[i+1]
			}
			if s.parent != next {
				m.fail("%s: the history is not a chain: %.12s's parent is %.12s, the log's next record %.12s", ws, id, s.parent, next)
			}
		}
		lost := map[string]string{}
		for _, l := range wsj[ws].Lost {
			if f := forkCmdRE.FindStringSubmatch(l.Fork); f == nil || !idRE.MatchString(l.Snapshot) || !strings.HasPrefix(l.Snapshot, f[1]) {
				m.fail("%s: lost snapshot %.12s listed without its fork command: %q", ws, l.Snapshot, l.Fork)
			}
			lost[l.Snapshot] = l.Fork
			if m.snaps[l.Snapshot] == nil {
				m.resolveUnknown(h, ws, l.Snapshot)
			}
			m.snaps[l.Snapshot].inStore = true
		}
		m.lost[ws] = lost
		for _, id := range sortedKeys(m.snaps) {
			s := m.snaps[id]
			if s.ws != ws || !s.acked || reach[id] || s.discarded {
				continue
			}
			if _, ok := lost[id]; ok {
				continue
			}
			if m.proxy != nil && m.outboxBusy(m.homes[s.home], ws) {
				continue // queued on its machine, not uploaded yet
			}
			m.fail("%s: acknowledged snapshot %.12s (machine %d) is neither reachable from the head (%d records) nor listed as lost, and no rollback of the test dropped it: a dropped turn",
				ws, id, s.home, len(log))
		}
	}
	// Read snapshots back: a few per step, all at the end.
	var todo []string
	for _, id := range sortedKeys(m.snaps) {
		if s := m.snaps[id]; !s.verified && (s.inStore || m.proxy == nil || final && !m.outboxBusy(m.homes[s.home], s.ws)) {
			todo = append(todo, id)
		}
	}
	if !final {
		m.rng.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
		todo = todo[:min(2, len(todo))]
	}
	for _, id := range todo {
		if alt := m.snaps[id].alt; alt != nil && maps.Equal(m.export(h, id), alt) {
			m.snaps[id].verified = true
			continue
		}
		m.checkTree(h, id, m.snaps[id].tree, "snapshot")
		m.snaps[id].verified = true
	}
	if final {
		for _, id := range sortedKeys(m.snaps) {
			if s := m.snaps[id]; s.acked && !s.verified && !m.outboxBusy(m.homes[s.home], s.ws) {
				m.fail("acknowledged snapshot %.12s (machine %d, %s) never reached the store", id, s.home, s.ws)
			}
		}
	}
}

func shortIDs(set map[string]bool) []string {
	var out []string
	for _, id := range sortedKeys(set) {
		out = append(out, id[:min(12, len(id))])
	}
	return out
}

func keysOf(ids []string) map[string]bool {
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// mountTree reads every file of machine h's mount of ws.
func (m *multiTorture) mountTree(h *mhome, ws string, w *mwork) map[string]string {
	got := map[string]string{}
	err := filepath.WalkDir(w.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		got[strings.TrimPrefix(p, w.dir+"/")] = string(b)
		return err
	})
	if err != nil {
		m.fail("machine %d %s: walk the mount: %v", h.idx, ws, err)
	}
	return got
}

// cleanupOnce makes sure the test leaves no mount of ws at w.dir behind.
func (m *multiTorture) cleanupOnce(h *mhome, ws string, w *mwork) {
	if !w.cleanup {
		w.cleanup = true
		dir := w.dir
		m.t.Cleanup(func() { h.in.cleanupMount(ws, dir) })
	}
}

// diskFull fills machine h's state directory (its own tmpfs), writes and
// snapshots through the full disk, and frees it again: a write may fail
// (ENOSPC), and then leave the old content, nothing, or a prefix of the
// new; a snapshot may fail, but one that exits 0 is acknowledged like any
// other; the mount keeps serving.
func (m *multiTorture) diskFull(h *mhome, ws string, w *mwork) {
	filler := filepath.Join(h.in.home, "filler")
	f, err := os.Create(filler)
	if err != nil {
		m.fail("machine %d: create %s: %v", h.idx, filler, err)
	}
	defer os.Remove(filler)
	var st syscall.Statfs_t
	if err := syscall.Statfs(h.in.home, &st); err != nil {
		m.fail("statfs %s: %v", h.in.home, err)
	}
	syscall.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail)*st.Bsize)
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			break // full to the last block
		}
	}
	f.Close()
	var did []string
	for range 1 + m.rng.IntN(3) {
		if !(&record{PID: w.pid}).alive() {
			break // died as the disk filled (badgerFault, below)
		}
		name := fmt.Sprintf("d%d/f%d", m.rng.IntN(3), m.rng.IntN(6))
		p := filepath.Join(w.dir, name)
		data := fmt.Sprintf("m%d %s step %d, disk full %x\n", h.idx, ws, m.step, m.rng.Uint64())
		old, existed := w.live[name]
		os.MkdirAll(filepath.Dir(p), 0o755)
		err := os.WriteFile(p, []byte(data), 0o644)
		if err == nil {
			w.live[name] = data
			w.state = dirty
			did = append(did, "write "+name)
			continue
		}
		// A write refused with ENOSPC may have changed nothing (or only
		// made a directory, which the model does not track): the journal
		// may be clean, unless the file itself changed.
		if w.state == clean {
			w.state = maybeDirty
		}
		b, rerr := os.ReadFile(p)
		switch {
		case errors.Is(rerr, fs.ErrNotExist):
			if existed {
				w.state = dirty
			}
			delete(w.live, name)
		case rerr != nil && !(&record{PID: w.pid}).alive() && m.badgerFault(h, ws):
			m.fail("machine %d %s: KNOWN LIMIT, in the middle of a write: the daemon died of SIGBUS in Badger's table write on the full disk (README, durability contract), and the write to %s (%v) is in doubt", h.idx, ws, name, err)
		case rerr != nil:
			m.fail("machine %d %s: read %s back after a failed write (%v): %v", h.idx, ws, name, err, rerr)
		case string(b) == old && existed, strings.HasPrefix(data, string(b)):
			if !existed || string(b) != old {
				w.state = dirty
			}
			w.live[name] = string(b)
		default:
			m.fail("machine %d %s: a write to %s failed (%v) and left %q: neither the old content %q nor a prefix of the new", h.idx, ws, name, err, b, old)
		}
		did = append(did, fmt.Sprintf("write %s failed (%v), left %d bytes", name, err, len(b)))
	}
	if (&record{PID: w.pid}).alive() {
		r := m.run(h, "snapshot", ws, "-m", fmt.Sprintf("disk full, step %d", m.step))
		if id := strings.TrimSpace(r.stdout); r.code == 0 && idRE.MatchString(id) {
			m.acked(h, ws, w, id)
			did = append(did, "snapshot "+id[:12])
		} else {
			m.expect(h, "snapshot on a full disk", r, 0, 1)
			did = append(did, "snapshot failed: "+firstLine(r.stderr))
		}
	}
	os.Remove(filler)
	// Every daemon of this machine lives on, bar the known limit: a
	// table Badger was writing through mmap as the disk filled (SIGBUS).
	// That is a crash: what they acknowledged is in their journals, and
	// the test goes on as after a kill -9.
	for _, other := range slices.Sorted(maps.Keys(h.ws)) {
		ow := h.ws[other]
		if !ow.mounted || ow.stopped || (&record{PID: ow.pid}).alive() {
			continue
		}
		if !m.badgerFault(h, other) {
			m.fail("machine %d %s: the daemon (pid %d) died on a full disk; its log:\n%s", h.idx, other, ow.pid, lastLines(h.in.daemonLog(other), 40))
		}
		m.badgerDeaths++
		r := m.run(h, "unmount", "--no-wait", other)
		m.expect(h, "unmount of a daemon that died on a full disk", r, 0)
		ow.mounted = false
		did = append(did, fmt.Sprintf("KNOWN LIMIT: the daemon of %s died of SIGBUS in Badger's table write (a crash: unmount cleaned up)", other))
	}
	m.logStep("machine %d %s: disk full: %s; space freed", h.idx, ws, strings.Join(did, "; "))
}

// badgerFault reports whether the daemon of ws on h died of the known
// limit of a full disk: Badger builds its tables in sparse files through
// mmap, and a page it writes after the disk filled is SIGBUS (its log is
// preallocated, so the report survives the full disk).
func (m *multiTorture) badgerFault(h *mhome, ws string) bool {
	log := h.in.daemonLog(ws)
	i := strings.LastIndex(log, "[signal SIGBUS")
	if i < 0 {
		return false
	}
	// The faulting goroutine's stack is the first after the signal line.
	rest := log[i:]
	start := strings.Index(rest, "\ngoroutine ")
	if start < 0 {
		return false
	}
	block := rest[start+1:]
	if end := strings.Index(block, "\n\ngoroutine "); end >= 0 {
		block = block[:end]
	}
	return strings.Contains(block, "github.com/dgraph-io/")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
