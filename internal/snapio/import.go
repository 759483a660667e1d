package snapio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cairnfs/cairn/chunkstore"
)

// ImportOptions configure ImportDir and ImportTar.
type ImportOptions struct {
	// Workspace is the new workspace's name; it must not exist yet.
	Workspace string
	// Message is the snapshot's message.
	Message string
	// Exclude lists path.Match patterns; a path is left out when one
	// matches its path relative to the root or its base name (so ".git"
	// and "*.pyc" work at any depth). An excluded directory excludes its
	// subtree. Each exclusion is listed in the snapshot record.
	Exclude []string
	// Host and Version go into the snapshot record (Host, CairnVersion).
	Host, Version string
	// Progress, if set, is called with running totals as the input is read
	// (often: throttle what you print).
	Progress func(Progress)
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// ImportDir makes a new workspace whose first snapshot is the tree at dir
// (dir's own attributes become the root's). It reads with lstat, so
// symlinks are kept as symlinks; devices, FIFOs and sockets are recorded,
// not opened; files are read without their holes (SEEK_DATA/SEEK_HOLE).
// Names of one inode (same device and inode number) stay hardlinks. An
// error names the path it is about; nothing moves the workspace's ref
// unless the whole import succeeds.
func ImportDir(ctx context.Context, store *chunkstore.Store, dir string, opts ImportOptions) (chunkstore.ID, *chunkstore.Snapshot, error) {
	b, err := newBuilder(ctx, store, opts)
	if err != nil {
		return chunkstore.ID{}, nil, err
	}
	if err := b.fromDir(ctx, dir); err != nil {
		return chunkstore.ID{}, nil, err
	}
	return b.commit(ctx, dir)
}

// ImportTar makes a new workspace whose first snapshot is the tar archive
// read from r (plain, or gzip or zstd compressed; name is for messages).
// The "./" entry, if any, gives the root's attributes; directories the
// archive implies but does not list get mode 0755 and the importing
// process's owner. GNU sparse entries keep their holes; xattrs come from
// SCHILY.xattr PAX records; ctime from PAX ctime records (or the import's
// time). A malformed archive is an error and changes nothing.
func ImportTar(ctx context.Context, store *chunkstore.Store, r io.Reader, name string, opts ImportOptions) (chunkstore.ID, *chunkstore.Snapshot, error) {
	b, err := newBuilder(ctx, store, opts)
	if err != nil {
		return chunkstore.ID{}, nil, err
	}
	if err := b.fromTar(ctx, r, name); err != nil {
		return chunkstore.ID{}, nil, err
	}
	return b.commit(ctx, name)
}

// newBuilder checks the options and that the workspace is new, before any
// work is done.
func newBuilder(ctx context.Context, store *chunkstore.Store, opts ImportOptions) (*builder, error) {
	if err := chunkstore.ValidWorkspaceName(opts.Workspace); err != nil {
		return nil, err
	}
	x, err := newExcluder(opts.Exclude)
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if _, err := store.Ref(ctx, opts.Workspace); err == nil {
		return nil, exists(opts.Workspace)
	} else if !errors.Is(err, chunkstore.ErrNotFound) {
		return nil, err
	}
	return &builder{store: store, opts: opts, excl: x, now: opts.Now().UnixNano(), start: store.Stats()}, nil
}

func exists(ws string) error {
	return fmt.Errorf("%w: workspace %q already exists; import into a new name (to branch from %s instead, use `cairn fork %s NEWNAME`)",
		chunkstore.ErrConflict, ws, ws, ws)
}

// commit stores the trees, the snapshot record and the new ref.
func (b *builder) commit(ctx context.Context, source string) (chunkstore.ID, *chunkstore.Snapshot, error) {
	b.number()
	rootTree, err := b.putTree(ctx, b.root, "")
	if err != nil {
		return chunkstore.ID{}, nil, err
	}
	after := b.store.Stats()
	b.stats.ChangedFiles, b.stats.ChangedBytes = b.stats.Files, b.stats.Bytes
	b.stats.NewBlobs = after.NewBlobs - b.start.NewBlobs
	b.stats.NewBytes = after.NewStoredBytes - b.start.NewStoredBytes
	r := b.root
	host := b.opts.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	snap := &chunkstore.Snapshot{
		Root: rootTree,
		RootAttr: chunkstore.RootAttr{Mode: r.mode, UID: r.uid, GID: r.gid, Atime: r.atime, Mtime: r.mtime, Ctime: r.ctime,
			Xattrs: sortXattrs(r.xattrs)},
		NextIno:      b.nextIno,
		Workspace:    b.opts.Workspace,
		Seq:          1,
		Time:         b.opts.Now().UTC(),
		Message:      b.opts.Message,
		Host:         host,
		CairnVersion: b.opts.Version,
		Provenance:   map[string]string{"imported_from": strings.ToValidUTF8(source, "\uFFFD")},
		Stats:        b.stats,
		Changes:      b.changes,
		Excluded:     b.excluded,
	}
	id, err := b.store.PutSnapshot(ctx, snap)
	if err != nil {
		return chunkstore.ID{}, nil, err
	}
	if _, err := b.store.SetRef(ctx, b.opts.Workspace, id, nil); err != nil {
		if errors.Is(err, chunkstore.ErrConflict) {
			return chunkstore.ID{}, nil, exists(b.opts.Workspace)
		}
		return chunkstore.ID{}, nil, err
	}
	return id, snap, nil
}
