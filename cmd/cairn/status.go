package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/daemon"
)

func newStatusCommand() *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show mounted workspaces: dirty bytes, last snapshot, local disk use",
		ArgsUsage: "[WORKSPACE]",
		Description: `Lists the workspaces mounted from this state directory (or just WORKSPACE):
where, by which daemon, what changed since the last snapshot, and the local
disk the journal and the store's cache take. A mount whose daemon is gone is
listed as stale.

Examples:
   cairn status
   cairn status --json agent-1`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usageError{errors.New("status takes at most one WORKSPACE")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			return runStatus(c.Context, os.Stdout, g, c.Args().First(), c.Bool("json"))
		},
	}
}

// mountStatus is one line of `cairn status`.
type mountStatus struct {
	*daemon.StatusReply
	State string `json:"state"` // "mounted" or "stale"
	Error string `json:"error,omitempty"`
}

func runStatus(ctx context.Context, w io.Writer, g globals, ws string, asJSON bool) error {
	var recs []*daemon.Record
	if ws != "" {
		r, err := daemon.ReadRecord(g.Home, ws)
		if err != nil {
			return err
		}
		recs = []*daemon.Record{r}
	} else {
		var err error
		if recs, err = daemon.Records(g.Home); err != nil {
			return err
		}
	}
	out := []mountStatus{}
	for _, r := range recs {
		s := mountStatus{State: "mounted"}
		if r.Alive() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			s.StatusReply, s.Error = must(daemon.NewClient(r.Socket).Status(cctx))
			cancel()
		} else {
			s.State, s.Error = "stale", fmt.Sprintf("daemon pid %d is gone; `cairn unmount %s` cleans up", r.PID, r.Workspace)
		}
		if s.StatusReply == nil {
			s.StatusReply = &daemon.StatusReply{Workspace: r.Workspace, Dir: r.Dir, PID: r.PID, Store: r.Store, Started: r.Started}
		}
		out = append(out, s)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(w, "no workspaces mounted from", g.Home)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKSPACE\tDIR\tSTATE\tHEAD\tDIRTY\tFILES\tLAST SNAPSHOT\tLOCAL DISK")
	for _, s := range out {
		head, last := "-", "-"
		if s.Head != "" {
			head = fmt.Sprintf("%s (@%d)", s.Head[:12], s.Seq)
			last = s.SnapshotTime.Local().Format(time.DateTime)
		}
		state := s.State
		if s.Error != "" {
			state += ": " + s.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d inodes, %s\t%d (%s)\t%s\t%s journal, %s cache\n", s.Workspace, s.Dir, state, head,
			s.DirtyInodes, bytesString(s.DirtyBytes), s.Files, bytesString(s.Bytes), last, bytesString(uint64(s.JournalBytes)), bytesString(uint64(s.CacheBytes)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range out {
		if t := transportString(s.StatusReply); t != "" {
			fmt.Fprintf(w, "%s: %s\n", s.Workspace, t)
		}
		if l := s.Lease; l != nil {
			msg := fmt.Sprintf("%s: lease %s, until %s", s.Workspace, l.State, l.Expires.Local().Format(time.DateTime))
			if l.LastError != "" {
				msg += " (" + l.LastError + ")"
			}
			fmt.Fprintln(w, msg)
		}
		if u := s.Uploads; u != nil && (u.Pending > 0 || u.Failing != "" || len(u.Lost) > 0) {
			fmt.Fprintf(w, "%s: %s\n", s.Workspace, uploadsString(u))
		}
		if s.ReadOnly {
			fmt.Fprintf(w, "%s: READ-ONLY: %s\n", s.Workspace, s.ReadOnlyReason)
		}
		for _, l := range s.LostSnapshots {
			fmt.Fprintf(w, "%s: %s\n", s.Workspace, lostString(l))
		}
	}
	return nil
}

// uploadsString says what a workspace's outbox holds.
func uploadsString(u *daemon.Uploads) string {
	msg := "all snapshots uploaded"
	if u.Pending > 0 {
		msg = fmt.Sprintf("%d uploads pending (%s), oldest queued %s ago", u.Pending, bytesString(uint64(u.Bytes)), time.Since(u.Oldest).Round(time.Second))
	}
	if u.Failing != "" {
		msg += fmt.Sprintf("; uploads failing since %s: %s (retrying; nothing is lost)", u.Since.Local().Format(time.DateTime), u.Failing)
	}
	for _, l := range u.Lost {
		ws, snap, _ := strings.Cut(l, " -> ")
		msg += fmt.Sprintf("; another writer moved %s first: snapshot %s was not made its head (keep it: cairn fork %s NEWNAME)", ws, snap, snap)
	}
	return msg
}

// lostString says what a lost snapshot is and how to keep it.
func lostString(l daemon.LostStatus) string {
	msg := fmt.Sprintf("snapshot %s is not on the history (%s", l.Snapshot.Short(), l.Reason)
	if !l.Head.IsZero() {
		msg += "; the head was " + l.Head.Short()
	}
	return msg + "); keep it: " + l.Fork
}

func must[T any](v T, err error) (T, string) {
	if err != nil {
		return v, err.Error()
	}
	return v, ""
}

// bytesString formats n for people: 512 B, 1.5 KiB, 12.0 MiB.
func bytesString(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// transportString says how a mount is served ("" for a daemon that did
// not say).
func transportString(s *daemon.StatusReply) string {
	switch {
	case s.Transport == "":
		return ""
	case s.TransportQueues > 0:
		return fmt.Sprintf("FUSE over %s (%d queues)", s.Transport, s.TransportQueues)
	case s.TransportFallback != "":
		return fmt.Sprintf("FUSE over %s (%s)", s.Transport, s.TransportFallback)
	}
	return "FUSE over " + s.Transport
}
