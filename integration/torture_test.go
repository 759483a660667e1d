package integration

import (
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var tortureCycles = flag.Int("history.torture.cycles", 100, "cycles of the history torture test (make torture runs 1000)")

// TestHistory_Torture runs cycles of random writes, snapshots, forks,
// rollbacks, restores, remounts and unmounts over several workspaces, and checks
// after every step that each mounted workspace's tree is exactly its model:
// no lost write, no stray file.
func TestHistory_Torture(t *testing.T) {
	in := newInstance(t)
	rng := rand.New(rand.NewPCG(7, uint64(*tortureCycles)))
	type ws struct {
		name  string
		dir   string            // mount point; "" while unmounted
		model map[string]string // path -> content
	}
	snaps := map[string]map[string]string{} // snapshot ID -> tree
	var all []*ws
	add := func(name string) *ws {
		w := &ws{name: name, model: map[string]string{}}
		w.dir = in.mount(name)
		all = append(all, w)
		return w
	}
	add("t0")
	var history []string
	ops := map[string]int{} // what the cycles did, for the log
	check := func(step string) {
		t.Helper()
		history = append(history, step)
		for _, op := range []string{"mount", "snapshot", "fork", "rollback", "restore", "remount", "unmount"} {
			if strings.Contains(step, ": "+op) {
				ops[op]++
			}
		}
		for _, w := range all {
			if w.dir == "" {
				continue
			}
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
				log, _ := os.ReadFile(filepath.Join(in.home, "workspaces", w.name, "daemon.log"))
				t.Fatalf("%s: walk %s: %v\ndaemon log:\n%s", step, w.name, err, log)
			}
			if !maps.Equal(got, w.model) {
				var diffs []string
				for _, k := range sortedKeys(got) {
					if v, ok := w.model[k]; !ok || v != got[k] {
						diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q (in model: %v)", k, got[k], v, ok))
					}
				}
				for _, k := range sortedKeys(w.model) {
					if _, ok := got[k]; !ok {
						diffs = append(diffs, fmt.Sprintf("%s: missing, want %q", k, w.model[k]))
					}
				}
				t.Fatalf("%s: workspace %s differs from its model:\n%s\nlast steps:\n%s", step, w.name, strings.Join(diffs, "\n"), strings.Join(history[max(0, len(history)-12):], "\n"))
			}
		}
	}
	// restore reverts 1-3 random paths of w (files or directories that the
	// snapshot or w has) to a random snapshot, and updates the model.
	restore := func(w *ws) string {
		ids := sortedKeys(snaps)
		if len(ids) == 0 {
			return ""
		}
		id := ids[rng.IntN(len(ids))]
		src := snaps[id]
		cands := map[string]bool{}
		for _, m := range []map[string]string{src, w.model} {
			for k := range m {
				cands[k], cands[filepath.Dir(k)] = true, true
			}
		}
		if len(cands) == 0 {
			return ""
		}
		keys := sortedKeys(cands)
		var paths []string
		for range 1 + rng.IntN(3) {
			paths = append(paths, keys[rng.IntN(len(keys))])
		}
		rep := decodeJSON[restoreReply](t, in.must(append([]string{"restore", "--json", "--to", w.name, id}, paths...)...))
		snaps[rep.Before] = maps.Clone(w.model)
		under := func(k, p string) bool { return k == p || strings.HasPrefix(k, p+"/") }
		for _, p := range paths {
			for k := range w.model {
				if under(k, p) {
					delete(w.model, k)
				}
			}
			for k, v := range src {
				if under(k, p) {
					w.model[k] = v
				}
			}
		}
		if rep.Snapshot != "" {
			snaps[rep.Snapshot] = maps.Clone(w.model)
		}
		return fmt.Sprintf("restore %v from %s", paths, id[:8])
	}
	for cycle := range *tortureCycles {
		w := all[rng.IntN(len(all))]
		step := fmt.Sprintf("cycle %d on %s", cycle, w.name)
		if w.dir == "" {
			if rng.IntN(2) == 0 { // restore into the unmounted workspace first
				step += ": " + restore(w)
			}
			w.dir = in.mount(w.name)
			check(step + ": mount")
			continue
		}
		// Random writes: create, overwrite, append, delete.
		for range 1 + rng.IntN(6) {
			name := fmt.Sprintf("d%d/f%d", rng.IntN(3), rng.IntN(8))
			p := filepath.Join(w.dir, name)
			switch _, exists := w.model[name]; {
			case exists && rng.IntN(4) == 0:
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				delete(w.model, name)
			default:
				data := fmt.Sprintf("%s %d %d\n", w.name, cycle, rng.Uint64())
				if exists && rng.IntN(2) == 0 {
					data = w.model[name] + data
				}
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
				w.model[name] = data
			}
		}
		check(step + ": writes")
		switch op := rng.IntN(10); {
		case op < 4: // snapshot
			id := strings.TrimSpace(in.must("snapshot", w.name))
			snaps[id] = maps.Clone(w.model)
			step += ": snapshot"
		case op < 5 && len(all) < 4: // fork a random snapshot
			ids := sortedKeys(snaps)
			if len(ids) == 0 {
				break
			}
			id := ids[rng.IntN(len(ids))]
			name := fmt.Sprintf("t%d", len(all))
			in.must("fork", id[:16], name)
			f := add(name)
			f.model = maps.Clone(snaps[id])
			step += ": fork " + id[:8]
		case op < 6: // restore paths from a snapshot of any workspace
			step += ": " + restore(w)
		case op < 7: // rollback to a snapshot of any workspace
			ids := sortedKeys(snaps)
			if len(ids) == 0 {
				break
			}
			id := ids[rng.IntN(len(ids))]
			out := in.must("rollback", "--json", w.name, id)
			rb := decodeJSON[struct {
				Discarded string `json:"discarded"`
			}](t, out)
			snaps[rb.Discarded] = maps.Clone(w.model)
			w.model = maps.Clone(snaps[id])
			step += ": rollback to " + id[:8]
		case op < 9: // remount
			in.must("unmount", w.name)
			in.mountAt(w.name, w.dir)
			step += ": remount"
		default: // unmount; a later cycle mounts it again
			in.must("unmount", w.name)
			w.dir = ""
			step += ": unmount"
		}
		check(step)
	}
	t.Logf("%d cycles over %d workspaces: %v", *tortureCycles, len(all), ops)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
