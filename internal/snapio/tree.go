package snapio

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cairnfs/cairn/chunkstore"
)

// node is one inode of the tree being imported; the names of a hardlinked
// inode share one node.
type node struct {
	typ                 chunkstore.EntryType
	mode, uid, gid      uint32
	atime, mtime, ctime int64
	size                uint64
	rdev                uint64
	xattrs              []chunkstore.Xattr
	inline              []byte
	content             chunkstore.FileContent
	target              string
	kids                map[string]*node // directories only

	ino   uint64 // assigned by number
	nlink uint32
}

// builder collects the imported tree, then stores it (commit).
type builder struct {
	store       *chunkstore.Store
	opts        ImportOptions
	excl        excluder
	root        *node
	now         int64            // ns; ctime of entries that carry none
	start       chunkstore.Stats // the store's counters before the import
	progress    Progress
	excluded    []chunkstore.Exclusion
	excludedSet map[string]bool

	// Set by number:
	nextIno uint64
	stats   chunkstore.SnapshotStats
	changes []chunkstore.Change
}

func (b *builder) report() {
	if b.opts.Progress != nil {
		b.opts.Progress(b.progress)
	}
}

// added counts one imported name for progress.
func (b *builder) added() {
	b.progress.Entries++
	b.report()
}

// exclude records, once, that rel (and everything under it) was left out
// because of pattern.
func (b *builder) exclude(rel, pattern string) { b.excludeWhy(rel, "--exclude "+pattern) }

func (b *builder) excludeWhy(rel, reason string) {
	if b.excludedSet == nil {
		b.excludedSet = make(map[string]bool)
	}
	if !b.excludedSet[rel] {
		b.excludedSet[rel] = true
		b.excluded = append(b.excluded, chunkstore.Exclusion{Path: rel, Reason: reason})
	}
}

// counter counts file content bytes for progress as they are read.
type counter struct{ b *builder }

func (c counter) add(n int) {
	c.b.progress.Bytes += uint64(n)
	c.b.report()
}

// number assigns inode numbers in tree order (root 1, hardlinks once),
// counts links and builds the statistics and the change list (every path
// added).
func (b *builder) number() {
	b.nextIno = 1
	b.root.ino, b.root.nlink = b.nextIno, 2
	b.nextIno++
	b.stats = chunkstore.SnapshotStats{Dirs: 1}
	b.numberDir(b.root, "")
}

func (b *builder) numberDir(dir *node, prefix string) {
	for _, name := range slices.Sorted(maps.Keys(dir.kids)) {
		n := dir.kids[name]
		if n.typ == chunkstore.TypeDir {
			dir.nlink++
		}
		b.changes = append(b.changes, chunkstore.Change{Path: prefix + name, Op: chunkstore.ChangeAdded, Size: n.entrySize()})
		if n.ino != 0 { // another name of a hardlinked inode
			n.nlink++
			continue
		}
		n.ino, n.nlink = b.nextIno, 1
		b.nextIno++
		switch n.typ {
		case chunkstore.TypeDir:
			n.nlink = 2
			b.stats.Dirs++
			b.numberDir(n, prefix+name+"/")
		case chunkstore.TypeRegular:
			b.stats.Files++
			b.stats.Bytes += n.size
		case chunkstore.TypeSymlink:
			b.stats.Symlinks++
		default:
			b.stats.Others++
		}
	}
}

func (n *node) entrySize() uint64 {
	switch n.typ {
	case chunkstore.TypeSymlink:
		return uint64(len(n.target))
	case chunkstore.TypeRegular:
		return n.size
	}
	return 0
}

// putTree stores dir's tree and its subtrees', bottom-up.
func (b *builder) putTree(ctx context.Context, dir *node, prefix string) (chunkstore.ID, error) {
	t := &chunkstore.Tree{Entries: make([]chunkstore.Entry, 0, len(dir.kids))}
	for _, name := range slices.Sorted(maps.Keys(dir.kids)) {
		if err := ctx.Err(); err != nil {
			return chunkstore.ID{}, err
		}
		n := dir.kids[name]
		e := chunkstore.Entry{
			Name: name, Type: n.typ, Mode: n.mode, UID: n.uid, GID: n.gid,
			Atime: n.atime, Mtime: n.mtime, Ctime: n.ctime, Size: n.entrySize(),
			Ino: n.ino, Nlink: n.nlink, Rdev: n.rdev, Xattrs: n.xattrs, Target: n.target,
		}
		switch n.typ {
		case chunkstore.TypeDir:
			id, err := b.putTree(ctx, n, prefix+name+"/")
			if err != nil {
				return chunkstore.ID{}, err
			}
			e.Subtree = id
		case chunkstore.TypeRegular:
			// As journal/commit.go fills entries: inline bytes for tiny
			// files, else the store's chunks or chunk lists.
			e.Inline, e.Chunks, e.ChunkLists = n.inline, n.content.Chunks, n.content.ChunkLists
		}
		t.Entries = append(t.Entries, e)
	}
	t.Sort()
	id, err := b.store.PutTree(ctx, t)
	if err != nil {
		return chunkstore.ID{}, fmt.Errorf("directory %q: %w", strings.TrimSuffix(prefix, "/"), err)
	}
	return id, nil
}

// newDir returns a directory node with the given attributes.
func newDir(mode, uid, gid uint32, t int64) *node {
	return &node{typ: chunkstore.TypeDir, mode: mode, uid: uid, gid: gid, atime: t, mtime: t, ctime: t, kids: make(map[string]*node)}
}

func sortXattrs(xs []chunkstore.Xattr) []chunkstore.Xattr {
	slices.SortFunc(xs, func(a, b chunkstore.Xattr) int { return strings.Compare(a.Name, b.Name) })
	return xs
}

// checkName refuses a name a tree cannot hold, naming its path.
func checkName(rel, name string) error {
	if len(name) > 255 {
		return fmt.Errorf("%s: a name of %d bytes (at most 255)", rel, len(name))
	}
	return nil
}
