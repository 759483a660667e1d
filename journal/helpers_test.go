package journal_test

import (
	"context"
	"fmt"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/journal"
)

func fmtAny(v any) string { return fmt.Sprint(v) }

// childJournal opens the journal a crash test's child process works on:
// the local store in storeDir, the journal in dir; fail reports and exits.
func childJournal(storeDir, dir, ws string, fail func(format string, args ...any)) *journal.Journal {
	ctx := context.Background()
	be, err := local.Open(storeDir, local.Options{})
	if err != nil {
		fail("open backend: %v", err)
	}
	st, err := chunkstore.Open(ctx, be, chunkstore.Options{})
	if err != nil {
		fail("open store: %v", err)
	}
	j, err := journal.Open(ctx, journal.Config{Dir: dir, Store: st, Workspace: ws})
	if err != nil {
		fail("open journal: %v", err)
	}
	return j
}
