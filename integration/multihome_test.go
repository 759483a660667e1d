package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
)

// Several machines on one store: one linear history, or a refusal that
// names what to do; never a turn dropped with exit 0 (DESIGN.md,
// durability contract 5 and 7). Each test is a recipe an outside tester
// found losing turns.

// logIDs returns a workspace's history, newest first, and checks that it
// is a chain: each record's parent is the next one.
func logIDs(t *testing.T, in *instance, ws string) []string {
	t.Helper()
	entries := decodeJSON[[]struct {
		ID string `json:"id"`
	}](t, in.must("log", "--json", ws))
	var ids []string
	for i, e := range entries {
		ids = append(ids, e.ID)
		rec := decodeJSON[struct {
			Parents []string `json:"parents"`
		}](t, in.must("show", "--json", e.ID))
		switch {
		case i+1 < len(entries) && (len(rec.Parents) == 0 || rec.Parents[0] != entries[i+1].ID):
			t.Fatalf("history of %s is not a chain: %s has parents %v, the next record is %s", ws, e.ID[:12], rec.Parents, entries[i+1].ID[:12])
		case i+1 == len(entries) && len(rec.Parents) != 0:
			t.Fatalf("history of %s ends at %s, which has parents %v", ws, e.ID[:12], rec.Parents)
		}
	}
	return ids
}

// lostSnapshots lists what `cairn workspaces --json` reports as lost for ws.
func lostSnapshots(t *testing.T, in *instance, ws string) []string {
	t.Helper()
	wss := decodeJSON[[]struct {
		Name string `json:"name"`
		Lost []struct {
			Snapshot string `json:"snapshot"`
			Fork     string `json:"fork"`
		} `json:"lost"`
	}](t, in.must("workspaces", "--json"))
	var out []string
	for _, w := range wss {
		if w.Name != ws {
			continue
		}
		for _, l := range w.Lost {
			if !strings.HasPrefix(l.Fork, "cairn fork ") {
				t.Errorf("lost snapshot %s has no fork command: %q", l.Snapshot, l.Fork)
			}
			out = append(out, l.Snapshot)
		}
	}
	return out
}

// storeKinds runs fn against a local store and against S3 (versitygw).
func storeKinds(t *testing.T, fn func(t *testing.T, a *instance)) {
	t.Run("Local", func(t *testing.T) { fn(t, newInstance(t)) })
	t.Run("S3", func(t *testing.T) {
		srv := s3test.Start(t)
		fn(t, newS3Instance(t, srv))
	})
}

// Issue 15, case 1: a machine that mounted the workspace before picks up
// the turns another machine took since, whatever the order.
func TestMultiHome_ResumeAlternating(t *testing.T) {
	storeKinds(t, func(t *testing.T, a *instance) {
		homes := []*instance{a, a.otherMachine()}
		want := map[string]string{}
		var acked []string
		for i := range 8 {
			in := homes[i%2]
			dir := in.mount("w")
			got := map[string]string{}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				got[e.Name()] = string(b)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("resume %d on home %d: sees %v, want %v", i, i%2, got, want)
			}
			name := fmt.Sprintf("f%d", i)
			want[name] = fmt.Sprintf("turn %d\n", i)
			writeFiles(t, dir, map[string]string{name: want[name]})
			acked = append(acked, strings.TrimSpace(in.must("snapshot", "--wait", "w", "-m", name)))
			in.must("unmount", "w")
		}
		ids := logIDs(t, a, "w")
		slices.Reverse(ids)
		if !slices.Equal(ids, acked) {
			t.Fatalf("history %v, want every acknowledged snapshot in order %v", ids, acked)
		}
	})
}

// Issue 15, case 1 with unsnapshotted changes: a machine whose journal has
// changes the head does not is refused, with both snapshots named; the
// changes are kept as a snapshot; each way out works.
func TestMultiHome_DivergedRefuses(t *testing.T) {
	storeKinds(t, func(t *testing.T, a *instance) {
		b := a.otherMachine()
		dir := a.mount("w")
		writeFiles(t, dir, map[string]string{"base": "1\n"})
		a.must("snapshot", "--wait", "w")
		writeFiles(t, dir, map[string]string{"a-dirty": "not snapshotted\n"})
		a.must("unmount", "w")

		bdir := b.mount("w")
		writeFiles(t, bdir, map[string]string{"b": "b's turn\n"})
		head := strings.TrimSpace(b.must("snapshot", "--wait", "w"))
		b.must("unmount", "w")

		var local string
		for _, args := range [][]string{{"mount", "w", shortTempDir(t)}, {"mount", "w", shortTempDir(t)}, {"snapshot", "w"}} {
			r := a.run(args...)
			if r.code != 4 || !strings.Contains(r.stderr, "moved on") || !strings.Contains(r.stderr, head[:12]) {
				t.Fatalf("cairn %s on the diverged machine: exit %d, stderr %s", args[0], r.code, r.stderr)
			}
			lost := lostSnapshots(t, a, "w")
			if len(lost) != 1 || !strings.Contains(r.stderr, "cairn fork "+lost[0][:12]) || !strings.Contains(r.stderr, "cairn rollback w "+head[:12]) {
				t.Fatalf("lost %v; message %s", lost, r.stderr)
			}
			if local != "" && lost[0] != local {
				t.Fatalf("a second attempt kept another snapshot %s (first %s)", lost[0], local)
			}
			local = lost[0]
		}
		if got := a.must("cat", local+":a-dirty"); got != "not snapshotted\n" {
			t.Fatalf("the kept snapshot has a-dirty = %q", got)
		}
		if ids := logIDs(t, a, "w"); ids[0] != head || len(ids) != 2 {
			t.Fatalf("history %v: the refusals moved the head (want %s on top)", ids, head[:12])
		}

		// Continue from the head here: the local changes stay in the kept
		// snapshot, the mount shows the head.
		a.must("rollback", "w", head)
		adir := a.mount("w")
		if _, err := os.Stat(filepath.Join(adir, "a-dirty")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a-dirty after continuing from the head: %v", err)
		}
		if got, _ := os.ReadFile(filepath.Join(adir, "b")); string(got) != "b's turn\n" {
			t.Fatalf("b after continuing from the head: %q", got)
		}
		a.must("unmount", "w")

		// Or adopt the kept snapshot as the head: the head it replaces is
		// listed as lost, nothing drops out of sight.
		adir = a.mount("w")
		writeFiles(t, adir, map[string]string{"a-dirty-2": "again\n"})
		a.must("unmount", "w")
		bdir = b.mount("w")
		writeFiles(t, bdir, map[string]string{"b": "b's second turn\n"})
		head2 := strings.TrimSpace(b.must("snapshot", "--wait", "w"))
		b.must("unmount", "w")
		if r := a.run("mount", "w", shortTempDir(t)); r.code != 4 {
			t.Fatalf("second divergence: exit %d, %s", r.code, r.stderr)
		}
		var local2 string
		for _, l := range lostSnapshots(t, a, "w") {
			if l != local {
				local2 = l
			}
		}
		a.must("rollback", "w", local2)
		if ids := logIDs(t, a, "w"); ids[0] != local2 {
			t.Fatalf("after adopting %s the head is %s", local2[:12], ids[0][:12])
		}
		if lost := lostSnapshots(t, b, "w"); !slices.Contains(lost, head2) || slices.Contains(lost, local2) {
			t.Fatalf("after adopting the local changes, lost = %v; want the old head %s and not %s", lost, head2[:12], local2[:12])
		}
		adir = a.mount("w")
		if got, _ := os.ReadFile(filepath.Join(adir, "a-dirty-2")); string(got) != "again\n" {
			t.Fatalf("after adopting, a-dirty-2 = %q", got)
		}
	})
}

// Issue 15, case 2: an offline snapshot on a machine where the workspace
// is not mounted takes the lease like a mount: refused while another
// machine's mount holds it; the holder's history is untouched.
func TestMultiHome_OfflineVerbsTakeTheLease(t *testing.T) {
	a := newInstance(t)
	b := a.otherMachine()
	bdir := b.mount("w")
	writeFiles(t, bdir, map[string]string{"f": "b1\n"})
	b.must("snapshot", "w")
	b.must("unmount", "w")
	dir := a.mount("w")
	writeFiles(t, dir, map[string]string{"f": "a1\n"})
	a1 := strings.TrimSpace(a.must("snapshot", "w"))

	// B's journal is clean and behind; A holds the lease.
	for _, args := range [][]string{{"snapshot", "w"}, {"rollback", "w", a1}, {"restore", a1, "f", "--to", "w"}} {
		r := b.run(args...)
		if r.code != 4 || !strings.Contains(r.stderr, "held by") {
			t.Fatalf("cairn %s while another machine holds the lease: exit %d, %s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	writeFiles(t, dir, map[string]string{"f": "a2\n"})
	a2 := strings.TrimSpace(a.must("snapshot", "w"))
	if ids := logIDs(t, a, "w"); ids[0] != a2 || ids[1] != a1 || len(ids) != 3 {
		t.Fatalf("history after the refused offline verbs: %v", ids)
	}
	if lost := lostSnapshots(t, a, "w"); len(lost) != 0 {
		t.Fatalf("lost snapshots: %v", lost)
	}
}

// Issue 15, case 3: a daemon whose lease is taken over keeps its mount,
// read-only, and says so; it never unmounts into a bare directory, and
// its snapshots are refused.
func TestMultiHome_LostLeaseTurnsReadOnly(t *testing.T) {
	a := newInstance(t)
	a.extra = append(a.extra, "CAIRN_LEASE_TTL=1s")
	b := a.otherMachine()
	dir := a.mount("w")
	writeFiles(t, dir, map[string]string{"f": "a\n"})
	a.must("snapshot", "w")
	rec := a.record("w")
	if err := syscall.Kill(rec.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			syscall.Kill(rec.PID, syscall.SIGCONT)
		}
	})
	// B takes over once the lease expired (1 s TTL + the 10 s grace).
	bdir := shortTempDir(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := b.run("mount", "--force", "w", bdir)
		if r.code == 0 {
			t.Cleanup(func() { b.cleanupMount("w", bdir) })
			break
		}
		if time.Now().After(deadline) || !strings.Contains(r.stderr, "held by") {
			t.Fatalf("takeover: exit %d, %s", r.code, r.stderr)
		}
		time.Sleep(500 * time.Millisecond)
	}
	writeFiles(t, bdir, map[string]string{"f": "b\n"})
	bSnap := strings.TrimSpace(b.must("snapshot", "w"))
	syscall.Kill(rec.PID, syscall.SIGCONT)
	stopped = false

	// A finds its lease lost at its next renewal: read-only from then on.
	deadline = time.Now().Add(30 * time.Second)
	for {
		err := os.WriteFile(filepath.Join(dir, "after"), []byte("x"), 0o644)
		if errors.Is(err, syscall.EROFS) {
			break
		}
		if err != nil && !errors.Is(err, syscall.EROFS) {
			t.Fatalf("write after the takeover: %v (want EROFS)", err)
		}
		os.Remove(filepath.Join(dir, "after"))
		if time.Now().After(deadline) {
			t.Fatal("A still takes writes 30 s after its lease was taken over")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !rec.alive() || !isMounted(dir) {
		t.Fatalf("A's daemon alive %v, mounted %v: it must keep serving, read-only", rec.alive(), isMounted(dir))
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f")); string(got) != "a\n" {
		t.Fatalf("A's read-only mount reads f = %q", got)
	}
	st := decodeJSON[[]struct {
		ReadOnly bool `json:"read_only"`
		Lease    struct {
			State string `json:"state"`
		} `json:"lease"`
	}](t, a.must("status", "--json", "w"))
	if len(st) != 1 || !st[0].ReadOnly || st[0].Lease.State != "lost" {
		t.Fatalf("A's status after losing its lease: %+v", st)
	}
	if out := a.must("status"); !strings.Contains(out, "READ-ONLY") {
		t.Errorf("status does not say read-only:\n%s", out)
	}
	if r := a.run("snapshot", "w"); r.code != 4 {
		t.Fatalf("snapshot on the read-only mount: exit %d, %s", r.code, r.stderr)
	}
	log, _ := os.ReadFile(filepath.Join(a.home, "workspaces", "w", "daemon.log"))
	if !strings.Contains(string(log), "read-only") {
		t.Errorf("A's log does not say it turned read-only:\n%s", log)
	}
	if ids := logIDs(t, b, "w"); ids[0] != bSnap {
		t.Fatalf("head %s, want B's %s", ids[0][:12], bSnap[:12])
	}
	a.must("unmount", "w")
	if isMounted(dir) {
		t.Fatal("still mounted after unmount")
	}
}
