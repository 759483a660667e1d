package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/daemon"
)

// writeJSON prints v indented, the format of every --json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// storeAction runs f with the store of the verb's globals.
func storeAction(c *cli.Context, f func(ctx context.Context, g globals, st *chunkstore.Store) error) error {
	g, err := globalsFrom(c)
	if err != nil {
		return err
	}
	st, closeStore, err := openStore(c.Context, g)
	if err != nil {
		return err
	}
	defer closeStore()
	return f(c.Context, g, st)
}

// logEntry is one snapshot in `cairn log`.
type logEntry struct {
	ID      string                   `json:"id"`
	Ref     string                   `json:"ref"` // WORKSPACE@N
	Time    time.Time                `json:"time"`
	Message string                   `json:"message,omitempty"`
	Labels  map[string]string        `json:"labels,omitempty"`
	Stats   chunkstore.SnapshotStats `json:"stats"`
}

func newLogCommand() *cli.Command {
	return &cli.Command{
		Name:      "log",
		Usage:     "list a workspace's snapshots, newest first",
		ArgsUsage: "WORKSPACE|SNAP",
		Description: `Walks the history back from a workspace's head (or from any snapshot):
ID, WORKSPACE@N, time, message, labels, files and bytes changed, and the new
bytes the snapshot stored.

Examples:
   cairn log agent-1
   cairn log -n 5 agent-1@12
   cairn log --json agent-1`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "n", Usage: "show at most `N` snapshots (0: all)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("log takes WORKSPACE or SNAP")}
			}
			if c.Int("n") < 0 {
				return usageError{errors.New("-n must be >= 0")}
			}
			return storeAction(c, func(ctx context.Context, _ globals, st *chunkstore.Store) error {
				return runLog(ctx, os.Stdout, st, c.Args().First(), c.Int("n"), c.Bool("json"))
			})
		},
	}
}

func runLog(ctx context.Context, w io.Writer, st *chunkstore.Store, ref string, limit int, asJSON bool) error {
	id, err := st.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	entries := []logEntry{}
	err = st.History(ctx, id, limit, func(id chunkstore.ID, snap *chunkstore.Snapshot) error {
		entries = append(entries, logEntry{ID: id.String(), Ref: fmt.Sprintf("%s@%d", snap.Workspace, snap.Seq), Time: snap.Time,
			Message: snap.Message, Labels: snap.Labels, Stats: snap.Stats})
		return nil
	})
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, entries)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tREF\tTIME\tCHANGED\tNEW\tMESSAGE")
	for _, e := range entries {
		msg := e.Message
		if l := formatLabels(e.Labels); l != "" {
			msg = strings.TrimSpace(msg + " " + l)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d files, %s\t%s\t%s\n", e.ID[:12], e.Ref, e.Time.Local().Format("2006-01-02 15:04:05"),
			e.Stats.ChangedFiles, bytesString(e.Stats.ChangedBytes), bytesString(e.Stats.NewBytes), strings.ReplaceAll(msg, "\n", " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// A workspace's snapshots that are not on its history are named too:
	// nothing drops out of sight.
	if chunkstore.ValidWorkspaceName(ref) == nil {
		if lost, err := st.Lost(ctx, ref); err == nil {
			for _, l := range daemon.LostStatusOf(lost) {
				fmt.Fprintf(w, "not on this history: %s\n", lostString(l))
			}
		}
	}
	return nil
}

func formatLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "[%s=%s]", k, m[k])
	}
	return b.String()
}

// showRecord is `cairn show --json`: the record with its ID and changes.
type showRecord struct {
	ID string `json:"id"`
	*chunkstore.Snapshot
	Changes []chunkstore.Change `json:"changes"`
}

func newShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print a snapshot's whole record: provenance, stats, changed paths",
		ArgsUsage: "SNAP",
		Description: `SNAP is WORKSPACE (its head), WORKSPACE@N, or a unique prefix of a
snapshot ID.

Examples:
   cairn show agent-1
   cairn show agent-1@3
   cairn show --json 3fa9c2`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError{errors.New("show takes SNAP")}
			}
			return storeAction(c, func(ctx context.Context, _ globals, st *chunkstore.Store) error {
				return runShow(ctx, os.Stdout, st, c.Args().First(), c.Bool("json"))
			})
		},
	}
}

func runShow(ctx context.Context, w io.Writer, st *chunkstore.Store, ref string, asJSON bool) error {
	id, err := st.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	snap, err := st.Snapshot(ctx, id)
	if err != nil {
		return err
	}
	changes, err := st.Changes(ctx, snap)
	if err != nil {
		return err
	}
	if changes == nil {
		changes = []chunkstore.Change{}
	}
	if asJSON {
		return writeJSON(w, showRecord{ID: id.String(), Snapshot: snap, Changes: changes})
	}
	fmt.Fprintf(w, "snapshot  %s\n", id)
	fmt.Fprintf(w, "ref       %s@%d\n", snap.Workspace, snap.Seq)
	fmt.Fprintf(w, "time      %s\n", snap.Time.Local().Format(time.RFC3339))
	for i, p := range snap.Parents {
		fmt.Fprintf(w, "parent %d  %s\n", i+1, p)
	}
	if snap.Message != "" {
		fmt.Fprintf(w, "message   %s\n", snap.Message)
	}
	if l := formatLabels(snap.Labels); l != "" {
		fmt.Fprintf(w, "labels    %s\n", l)
	}
	if snap.Host != "" || snap.CairnVersion != "" {
		fmt.Fprintf(w, "made by   cairn %s on %s\n", snap.CairnVersion, snap.Host)
	}
	keys := make([]string, 0, len(snap.Provenance))
	for k := range snap.Provenance {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %s\n", k, snap.Provenance[k])
	}
	s := snap.Stats
	fmt.Fprintf(w, "contents  %d files, %d dirs, %d symlinks, %d others, %s\n", s.Files, s.Dirs, s.Symlinks, s.Others, bytesString(s.Bytes))
	fmt.Fprintf(w, "changed   %d files, %s; stored %d new blobs, %s\n", s.ChangedFiles, bytesString(s.ChangedBytes), s.NewBlobs, bytesString(s.NewBytes))
	for _, x := range snap.Excluded {
		fmt.Fprintf(w, "excluded  %q: %s\n", x.Path, x.Reason)
	}
	if e := snap.Egress; e != nil {
		fmt.Fprintf(w, "egress    policy %s", e.Mode)
		if e.HTTPIntercept {
			fmt.Fprint(w, ", HTTPS to the hosts with method rules intercepted (with a CA made for the turn)")
		}
		if e.Incomplete {
			fmt.Fprint(w, " (incomplete: some attempts were not counted)")
		}
		fmt.Fprintln(w)
		for _, d := range e.Destinations {
			names := ""
			if len(d.Names) > 0 {
				names = " (" + strings.Join(d.Names, ", ") + ")"
			}
			fmt.Fprintf(w, "  %-10s %s %s%s x%d\n", d.Verdict, d.Protocol, net.JoinHostPort(d.Addr, strconv.Itoa(int(d.Port))), names, d.Count)
		}
		for _, q := range e.DNS {
			fmt.Fprintf(w, "  dns %-8s %s %s x%d\n", q.Outcome, q.Type, q.Name, q.Count)
		}
	}
	if len(changes) > 0 {
		fmt.Fprintln(w)
	}
	for _, ch := range changes {
		fmt.Fprintf(w, "%s %s\n", changeMark(ch.Op), quotePath(strings.TrimPrefix(ch.Path, "/")))
	}
	return nil
}

// changeMark is the one-letter code of a change, as in git: A, M, D, and
// m for metadata only.
func changeMark(op chunkstore.ChangeOp) string {
	switch op {
	case chunkstore.ChangeAdded:
		return "A"
	case chunkstore.ChangeModified:
		return "M"
	case chunkstore.ChangeRemoved:
		return "D"
	}
	return "m"
}

// quotePath prints a path as is unless it holds bytes a terminal would
// interpret (then Go-quoted).
func quotePath(p string) string {
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}

// workspaceInfo is one line of `cairn workspaces`.
type workspaceInfo struct {
	Name         string    `json:"name"`
	Head         string    `json:"head,omitempty"`
	Seq          uint64    `json:"seq,omitempty"`
	Mounted      string    `json:"mounted,omitempty"` // the mount point, if a daemon here serves it
	LocalJournal bool      `json:"local_journal"`     // this state directory has a journal of it
	LastActivity time.Time `json:"last_activity,omitzero"`
	// Lease is the lease of the mount that serves it, wherever that is.
	Lease *chunkstore.LeaseInfo `json:"lease,omitempty"`
	// QueuedUploads counts writes to a remote store queued in its outbox
	// here (a daemon uploads them; or the next mount or snapshot).
	QueuedUploads int `json:"queued_uploads,omitempty"`
	// Lost are its snapshots that are in the store but not on its history
	// (a lost compare-and-swap, or a machine's changes kept when the head
	// moved elsewhere), with the command that forks each.
	Lost []daemon.LostStatus `json:"lost,omitempty"`
}

func newWorkspacesCommand() *cli.Command {
	return &cli.Command{
		Name:  "workspaces",
		Usage: "list every workspace: head, where it is mounted, last activity",
		Description: `Lists the workspaces of the store (those with a snapshot) and those that
only have a journal in this state directory (mounted, never snapshotted).

Examples:
   cairn workspaces
   cairn workspaces --json`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usageError{errors.New("workspaces takes no arguments")}
			}
			return storeAction(c, func(ctx context.Context, g globals, st *chunkstore.Store) error {
				return runWorkspaces(ctx, os.Stdout, g, st, c.Bool("json"))
			})
		},
	}
}

func runWorkspaces(ctx context.Context, w io.Writer, g globals, st *chunkstore.Store, asJSON bool) error {
	names, err := st.Workspaces(ctx)
	if err != nil {
		return err
	}
	byName := map[string]*workspaceInfo{}
	for _, n := range names {
		byName[n] = &workspaceInfo{Name: n}
	}
	if ents, err := os.ReadDir(filepath.Join(g.Home, "workspaces")); err == nil {
		for _, e := range ents {
			if chunkstore.ValidWorkspaceName(e.Name()) != nil {
				continue
			}
			if _, err := os.Stat(daemon.PathsOf(g.Home, e.Name()).Journal); err != nil {
				continue
			}
			if byName[e.Name()] == nil {
				byName[e.Name()] = &workspaceInfo{Name: e.Name()}
			}
			byName[e.Name()].LocalJournal = true
		}
	}
	out := make([]*workspaceInfo, 0, len(byName))
	for _, wi := range byName {
		if ref, err := st.Ref(ctx, wi.Name); err == nil {
			wi.Head = ref.Snapshot.String()
			wi.LastActivity = ref.Updated
			if snap, err := st.Snapshot(ctx, ref.Snapshot); err == nil {
				wi.Seq = snap.Seq
				if snap.Time.After(wi.LastActivity) {
					wi.LastActivity = snap.Time
				}
			}
		}
		if l, err := st.Lease(ctx, wi.Name); err == nil && !l.Expired(time.Now()) {
			wi.Lease = l
		}
		lost, err := st.Lost(ctx, wi.Name)
		if err != nil {
			return err
		}
		wi.Lost = daemon.LostStatusOf(lost)
		if q, err := os.ReadDir(filepath.Join(daemon.PathsOf(g.Home, wi.Name).Outbox, "q")); err == nil {
			wi.QueuedUploads = len(q)
		}
		if r, err := daemon.ReadRecord(g.Home, wi.Name); err == nil && r.Alive() {
			wi.Mounted = r.Dir
			if cl, err := daemon.NewClient(r.Socket).Status(ctx); err == nil && cl.DirtyInodes > 0 {
				wi.LastActivity = time.Now().UTC() // live changes not snapshotted yet
			}
		}
		out = append(out, wi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if asJSON {
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKSPACE\tHEAD\tMOUNTED\tLAST ACTIVITY")
	for _, wi := range out {
		head, mnt, last := "-", "-", "-"
		if wi.Head != "" {
			head = fmt.Sprintf("%s (@%d)", wi.Head[:12], wi.Seq)
		}
		switch {
		case wi.Mounted != "":
			mnt = wi.Mounted
		case wi.Lease != nil:
			mnt = fmt.Sprintf("by %s (lease until %s)", wi.Lease.Holder, wi.Lease.Expires.Local().Format(time.DateTime))
		}
		if wi.QueuedUploads > 0 {
			mnt += fmt.Sprintf("; %d uploads queued here", wi.QueuedUploads)
		}
		if !wi.LastActivity.IsZero() {
			last = wi.LastActivity.Local().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", wi.Name, head, mnt, last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, wi := range out {
		for _, l := range wi.Lost {
			fmt.Fprintf(w, "%s: %s\n", wi.Name, lostString(l))
		}
	}
	return nil
}
