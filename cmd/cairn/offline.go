package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/outbox"
	"github.com/cairnfs/cairn/daemon"
)

// leaseTTL is how long a lease taken here lasts unrenewed:
// CAIRN_LEASE_TTL (for tests and operators), or the default.
func leaseTTL() (time.Duration, error) {
	v := os.Getenv("CAIRN_LEASE_TTL")
	if v == "" {
		return 0, nil
	}
	ttl, err := time.ParseDuration(v)
	if err != nil {
		return 0, usageError{fmt.Errorf("CAIRN_LEASE_TTL=%q: %w", v, err)}
	}
	return ttl, nil
}

// takeLease acquires workspace ws's lease for a verb that writes it
// without a daemon (snapshot, rollback or restore of an unmounted
// workspace), as a mount does: a workspace mounted on another machine is
// refused (chunkstore.ErrLeased, naming the holder), so that no verb here
// moves the head under a live mount there. The holder ID is this state
// directory's (the one its daemon uses), so a daemon killed here does not
// keep its own machine out. Close the keeper to release the lease.
//
// With ob (a remote store's outbox), release first waits for its uploads
// (what the verb snapshotted, and its ref move) and records the ref moves
// found lost: the lease goes once they are done.
func takeLease(ctx context.Context, g globals, st *chunkstore.Store, ob *outbox.Backend, ws, verb string) (release func(), err error) {
	ttl, err := leaseTTL()
	if err != nil {
		return nil, err
	}
	// The workspace's local lock first, as a daemon does: a mount refused
	// meanwhile then touches nothing of this verb's (the lease has the
	// same holder ID).
	if err := os.MkdirAll(daemon.PathsOf(g.Home, ws).Dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := daemon.LockWorkspace(g.Home, ws)
	if err != nil {
		return nil, err
	}
	k, err := daemon.OpenLease(ctx, daemon.LeaseConfig{Store: st, Workspace: ws, Home: g.Home,
		Description: "cairn " + verb + " (unmounted)", TTL: ttl})
	if err != nil {
		lock.Close()
		return nil, err
	}
	return func() {
		if ob != nil {
			_ = ob.Wait(ctx)
			recordLostRefs(ctx, st, ob)
		}
		// Bounded: an unreachable store lets the lease expire by itself.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = k.Close(ctx)
		lock.Close()
	}, nil
}

// recordLostRefs records, in the store, the snapshots of ref moves an
// outbox found lost while this command drained it (see
// daemon.RecordLostRef), and says so on stderr.
func recordLostRefs(ctx context.Context, st *chunkstore.Store, ob *outbox.Backend) {
	if ob == nil {
		return
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	for _, l := range ob.Pending().Lost {
		daemon.RecordLostRef(ctx, st, l, logf)
	}
}
