package integration

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// writeFiles writes name -> content under root (directories as needed).
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON (%v): %s", err, s)
	}
	return v
}

type changeJSON struct {
	Path string `json:"path"`
	Op   string `json:"op"`
}

func changeSet(cs []changeJSON) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Op+" "+c.Path)
	}
	slices.Sort(out)
	return out
}

func TestHistory_Verbs(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("w")
	writeFiles(t, dir, map[string]string{"src/a.go": "package a\n", "src/b.go": "package b\n", "README": "hi\n"})
	id1 := strings.TrimSpace(in.must("snapshot", "w", "-m", "first", "--label", "turn=1"))
	at1 := manifest(t, dir)

	writeFiles(t, dir, map[string]string{"src/a.go": "package a // changed\n", "new.txt": "new\n"})
	if err := os.Remove(filepath.Join(dir, "src/b.go")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "README"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The live side of a diff: what changed since the head.
	live := decodeJSON[struct {
		To      string       `json:"to"`
		Changes []changeJSON `json:"changes"`
	}](t, in.must("diff", "--json", "w"))
	want := []string{"added new.txt", "metadata_only README", "modified src/a.go", "removed src/b.go"}
	if got := changeSet(live.Changes); !slices.Equal(got, want) || live.To != "live:w" {
		t.Errorf("diff w (live) = %v to %s, want %v", got, live.To, want)
	}
	id2 := strings.TrimSpace(in.must("snapshot", "w", "-m", "second"))

	// log: newest first, with refs, messages and labels.
	log := decodeJSON[[]struct {
		ID      string            `json:"id"`
		Ref     string            `json:"ref"`
		Message string            `json:"message"`
		Labels  map[string]string `json:"labels"`
	}](t, in.must("log", "--json", "w"))
	if len(log) != 2 || log[0].ID != id2 || log[0].Ref != "w@2" || log[1].ID != id1 || log[1].Message != "first" || log[1].Labels["turn"] != "1" {
		t.Errorf("log = %+v", log)
	}
	if out := in.must("log", "-n", "1", "w"); !strings.Contains(out, "w@2") || strings.Contains(out, "w@1") {
		t.Errorf("log -n 1:\n%s", out)
	}

	// show: the whole record.
	show := decodeJSON[struct {
		ID      string       `json:"id"`
		Seq     uint64       `json:"seq"`
		Parents []string     `json:"parents"`
		Changes []changeJSON `json:"changes"`
	}](t, in.must("show", "--json", "w@2"))
	if show.ID != id2 || show.Seq != 2 || len(show.Parents) != 1 || show.Parents[0] != id1 || !slices.Equal(changeSet(show.Changes), want) {
		t.Errorf("show w@2 = %+v", show)
	}
	if out := in.must("show", id1[:8]); !strings.Contains(out, "message   first") || !strings.Contains(out, "A src/a.go") {
		t.Errorf("show by ID prefix:\n%s", out)
	}

	// diff of two snapshots, and --stat.
	d := decodeJSON[struct {
		Changes []changeJSON `json:"changes"`
	}](t, in.must("diff", "--json", "w@1", "w@2"))
	if got := changeSet(d.Changes); !slices.Equal(got, want) {
		t.Errorf("diff w@1 w@2 = %v, want %v", got, want)
	}
	if out := in.must("diff", "--stat", "w@1", "w"); !strings.Contains(out, "1 added, 1 modified, 1 removed, 1 metadata only") {
		t.Errorf("diff --stat: %s", out)
	}
	if out := in.must("diff", "w@2", "w@2"); out != "" {
		t.Errorf("diff of a snapshot with itself: %q", out)
	}

	// ls and cat read a snapshot without mounting it.
	ls := decodeJSON[[]struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Mode string `json:"mode"`
	}](t, in.must("ls", "--json", "w@1:src"))
	if len(ls) != 2 || ls[0].Name != "a.go" || ls[1].Name != "b.go" || ls[0].Mode != "0644" {
		t.Errorf("ls w@1:src = %+v", ls)
	}
	if out := in.must("ls", "-l", "w"); !strings.Contains(out, "-rw------- 1 0 0 3") || !strings.Contains(out, "drwxr-xr-x") {
		t.Errorf("ls -l w:\n%s", out)
	}
	if out := in.must("cat", "w@1:src/a.go"); out != "package a\n" {
		t.Errorf("cat w@1:src/a.go = %q", out)
	}
	if out := in.must("cat", "w:src/a.go"); out != "package a // changed\n" {
		t.Errorf("cat w:src/a.go = %q", out)
	}

	// fork: O(1), mounts at once with the snapshot's tree.
	in.must("fork", "w@1", "f")
	fdir := in.mount("f")
	diffManifests(t, "fork of w@1", at1, manifest(t, fdir))
	ws := decodeJSON[[]struct {
		Name    string `json:"name"`
		Head    string `json:"head"`
		Mounted string `json:"mounted"`
	}](t, in.must("workspaces", "--json"))
	if len(ws) != 2 || ws[0].Name != "f" || ws[0].Head != id1 || ws[0].Mounted != fdir || ws[1].Name != "w" || ws[1].Head != id2 || ws[1].Mounted != dir {
		t.Errorf("workspaces = %+v", ws)
	}

	// rollback of a mounted workspace: refused while a file is open,
	// forced: the old handle gets ESTALE, the tree is the snapshot's.
	writeFiles(t, dir, map[string]string{"unsnapshotted.txt": "keep me\n"})
	beforeRollback := manifest(t, dir)
	f, err := os.OpenFile(filepath.Join(dir, "new.txt"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r := in.run("rollback", "w", "w@1"); r.code != 4 || !strings.Contains(r.stderr, "open files") {
		t.Errorf("rollback with an open file: exit %d, %s", r.code, r.stderr)
	}
	rb := decodeJSON[struct {
		To        string `json:"to"`
		Discarded string `json:"discarded"`
	}](t, in.must("rollback", "--force", "--json", "w", "w@1"))
	if rb.To != id1 || rb.Discarded == "" {
		t.Fatalf("rollback reply %+v", rb)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("fstat of a handle opened before a forced rollback: %v, want ESTALE", err)
	}
	f.Close()
	diffManifests(t, "after rollback to w@1", at1, manifest(t, dir))
	// Undo: the discarded state, unsnapshotted changes included.
	in.must("rollback", "w", rb.Discarded)
	diffManifests(t, "after undoing the rollback", beforeRollback, manifest(t, dir))

	// rollback of an unmounted workspace (through its journal here).
	in.must("unmount", "w")
	out := in.must("rollback", "w", "w@1")
	if !strings.Contains(out, "rolled back w to "+id1[:12]) {
		t.Errorf("offline rollback: %s", out)
	}
	in.mountAt("w", dir)
	diffManifests(t, "offline rollback, remounted", at1, manifest(t, dir))
	// ... and of one with no journal on this machine: the ref moves.
	other := in.otherMachine()
	in.must("unmount", "f")
	if out := other.must("rollback", "f", id2); !strings.Contains(out, "rolled back f to "+id2[:12]) {
		t.Errorf("ref-only rollback: %s", out)
	}
	if out := other.must("cat", "f:new.txt"); out != "new\n" {
		t.Errorf("cat f:new.txt after rollback = %q", out)
	}
}

func TestHistory_BadInput(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("w")
	writeFiles(t, dir, map[string]string{"a": "a"})
	in.must("snapshot", "w")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"log", "nope"}, 3, "workspaces: w"},
		{[]string{"show", "w@7"}, 3, "no snapshot @7"},
		{[]string{"show", "w@x"}, 2, "sequence number"},
		{[]string{"diff", "w", "nope"}, 3, "workspaces: w"},
		{[]string{"ls", "w:missing/dir"}, 3, "no /missing"},
		{[]string{"cat", "w:missing"}, 3, "no /missing"},
		{[]string{"cat", "w:"}, 2, "is a directory"},
		{[]string{"cat", "w"}, 2, "SNAP:PATH"},
		{[]string{"fork", "w", "w"}, 4, "exists"},
		{[]string{"fork", "w", "bad/name"}, 2, "workspace name"},
		{[]string{"fork", "nope", "x"}, 3, "workspaces: w"},
		{[]string{"rollback", "w", "nope"}, 3, "workspaces: w"},
		{[]string{"rollback", "nope", "w"}, 3, "nope"},
		{[]string{"log"}, 2, "log takes"},
		{[]string{"log", "-n", "-1", "w"}, 2, "-n"},
	} {
		r := in.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("cairn %s: exit %d, stderr %q; want exit %d and %q on one line", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.msg)
		}
	}
}
