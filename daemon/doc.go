// Package daemon is the mount process: it opens a workspace's journal over
// its store, serves it over FUSE (package fs) and answers a control API
// (HTTP/JSON on a unix socket in the state directory) for snapshot,
// rollback, status and unmount. It also holds the client of that API and
// the layout of the state directory (paths.go), which the CLI uses to find
// running daemons by workspace or mount point.
//
// A daemon that exits cleanly (unmount request, SIGTERM, the mount taken
// away) unmounts, flushes the journal and the store, and removes its
// record and socket. One killed with SIGKILL leaves a journal that the next
// mount replays (the journal's durability contract) and a stale mount and
// record that `cairn unmount` cleans up.
package daemon
