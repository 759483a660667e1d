package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// indexCache keeps verified copies of a store's index files on local disk,
// under <CacheDir>/<store ID>/index/, so that Open fetches only index files it
// has not seen.
type indexCache struct {
	dir string
}

func openIndexCache(cacheDir, storeID string) (*indexCache, error) {
	dir := filepath.Join(cacheDir, storeID, "index")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create index cache %s: %w", dir, err)
	}
	return &indexCache{dir: dir}, nil
}

func (c *indexCache) path(id ID) string { return filepath.Join(c.dir, id.String()) }

func (c *indexCache) load(id ID) ([]byte, bool) {
	data, err := os.ReadFile(c.path(id))
	return data, err == nil
}

// store writes a verified index file to the cache, atomically. Failures are
// ignored: the file is fetched again next time.
func (c *indexCache) store(id ID, data []byte) {
	tmp, err := writeTemp(c.dir, data)
	if err != nil {
		return
	}
	if os.Rename(tmp, c.path(id)) != nil {
		os.Remove(tmp)
	}
}

// writeTemp writes data to a new temporary file in dir, for the caller to
// rename into place, and returns its path. On failure nothing is left.
func writeTemp(dir string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// prune removes cached index files the backend no longer lists.
func (c *indexCache) prune(live map[ID]bool) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		id, err := ParseID(e.Name())
		if err != nil || !live[id] {
			os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
}

// loadIndex lists the backend's index files and loads each into memory,
// from the cache when it has a verified copy. Files are added to the
// in-memory index as they arrive and then dropped, so loading costs little
// more memory than the index itself.
func (s *Store) loadIndex(ctx context.Context) error {
	var ids []ID
	var total int64
	err := s.be.List(ctx, "index/", func(info backend.Info) error {
		name := strings.TrimPrefix(info.Key, "index/")
		id, err := ParseID(name)
		if err != nil {
			return nil // not ours; ignore
		}
		ids = append(ids, id)
		total += info.Size
		return nil
	})
	if err != nil {
		return fmt.Errorf("list index files: %w", err)
	}
	// An index entry takes about 41 bytes on disk.
	s.idx.reserve(int(total / 41))
	superseded, bad, err := s.loadIndexFiles(ctx, ids, nil)
	if err != nil {
		return err
	}
	if len(superseded) > 0 {
		// Rare: a file that supersedes others was loaded alongside them.
		// Load again without the superseded ones, so that their (possibly
		// deleted) packs are never consulted.
		s.idx = newMemIndex()
		if _, bad, err = s.loadIndexFiles(ctx, ids, superseded); err != nil {
			return err
		}
	}
	if len(bad) > 0 && len(bad) == len(ids) {
		if err := s.checkKey(ctx); err != nil {
			return err
		}
	}
	s.refreshMu.Lock()
	s.knownIndex = make(map[ID]bool, len(ids))
	for _, id := range ids {
		s.knownIndex[id] = true
	}
	s.noteBadIndex(bad)
	s.refreshMu.Unlock()
	if s.cache != nil {
		live := make(map[ID]bool, len(ids))
		for _, id := range ids {
			live[id] = true
		}
		s.cache.prune(live)
	}
	return nil
}

// checkKey tells a store whose every index file failed verification
// because the hash key in its config changed (nothing can be read: an
// error) from one whose index files are damaged (RepairIndex rebuilds them
// from the packs): a pack is named by the keyed hash of its trailer, so the
// first pack's trailer checks the key.
func (s *Store) checkKey(ctx context.Context) error {
	keyErr := fmt.Errorf("%w: no index file matches its name: the store's hash key in config was changed, or every index file is corrupt", ErrCorrupt)
	var first *backend.Info
	err := s.be.List(ctx, "packs/", func(info backend.Info) error {
		if id, err := ParseID(info.Key[strings.LastIndexByte(info.Key, '/')+1:]); err == nil && info.Key == packKey(id) {
			first = &info
			return errStopList
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopList) {
		return fmt.Errorf("list packs: %w", err)
	}
	if first == nil {
		return keyErr
	}
	id, _ := ParseID(first.Key[strings.LastIndexByte(first.Key, '/')+1:])
	if _, err := s.readTrailer(ctx, id, first.Size); err != nil {
		if errors.Is(err, ErrCorrupt) {
			return fmt.Errorf("%w (pack %s does not verify either: %v)", keyErr, id.Short(), err)
		}
		return err
	}
	return nil
}

var errStopList = errors.New("stop listing")

// refreshIndex loads the index files that other writers (other daemons,
// other machines) added since this store loaded its index: a blob missing
// from the index may be one of theirs (a snapshot made elsewhere).
func (s *Store) refreshIndex(ctx context.Context) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	var fresh []ID
	err := s.be.List(ctx, "index/", func(info backend.Info) error {
		if id, err := ParseID(strings.TrimPrefix(info.Key, "index/")); err == nil && !s.knownIndex[id] {
			fresh = append(fresh, id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list index files: %w", err)
	}
	_, bad, err := s.loadIndexFiles(ctx, fresh, nil)
	if err != nil {
		return err
	}
	if s.knownIndex == nil {
		s.knownIndex = make(map[ID]bool)
	}
	for _, id := range fresh {
		s.knownIndex[id] = true
	}
	s.noteBadIndex(bad)
	return nil
}

// noteBadIndex records index files skipped as corrupt and warns about
// each. s.refreshMu is held.
func (s *Store) noteBadIndex(bad map[ID]error) {
	for id, err := range bad {
		if s.badIndex == nil {
			s.badIndex = make(map[ID]bool)
		}
		s.badIndex[id] = true
		s.opts.Logf("skipped index file %s of the store at %s (%v): the blobs only it lists cannot be read until `cairn repair index` re-indexes their packs", indexKey(id), s.be.Properties().Location, err)
	}
}

// CorruptIndex returns the index files this store skipped because they
// failed verification (a bad checksum, bytes that do not decode). Blobs
// only they listed read as ErrCorrupt until RepairIndex re-indexes their
// packs.
func (s *Store) CorruptIndex() []ID {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	ids := make([]ID, 0, len(s.badIndex))
	for id := range s.badIndex {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

// missingBlob is the error for a blob the index does not list: with index
// files skipped as corrupt it is most likely one of theirs, and the error
// says how to get it back.
func (s *Store) missingBlob(id ID, n int) error {
	what := fmt.Sprintf("blob %s is", id)
	if n > 1 {
		what = fmt.Sprintf("%d blobs, such as %s, are", n, id)
	}
	if bad := s.CorruptIndex(); len(bad) > 0 {
		return fmt.Errorf("%w: %s not in the store's index: %d corrupt index file(s), such as %s, were skipped; run `cairn repair index` to re-index their packs", ErrCorrupt, what, len(bad), indexKey(bad[0]))
	}
	return fmt.Errorf("%w: %s not in the store's index", ErrNotFound, what)
}

// loadIndexFiles adds the index files ids, except those in skip, to the
// in-memory index, reading up to 8 at once. It returns the IDs that the
// loaded files supersede, among those loaded, and the files it skipped
// because they are corrupt (ErrCorrupt: not matching their name, or not
// decoding), with why. Any other failure (the backend's) is an error.
func (s *Store) loadIndexFiles(ctx context.Context, ids []ID, skip map[ID]bool) (map[ID]bool, map[ID]error, error) {
	loaded := make(map[ID]bool, len(ids))
	for _, id := range ids {
		loaded[id] = !skip[id]
	}
	var (
		mu         sync.Mutex
		errs       []error
		superseded = map[ID]bool{}
		bad        = map[ID]error{}
		sem        = make(chan struct{}, 8)
		wg         sync.WaitGroup
	)
	for _, id := range ids {
		if skip[id] {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f, err := s.readIndexFile(ctx, id)
			if err == nil {
				for _, p := range f.Packs {
					s.idx.addPack(p.ID, p.Entries)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrCorrupt):
				bad[id] = err
				return
			case err != nil:
				errs = append(errs, err)
				return
			}
			for _, old := range f.Supersedes {
				if loaded[old] {
					superseded[old] = true
				}
			}
		})
	}
	wg.Wait()
	return superseded, bad, errors.Join(errs...)
}

func (s *Store) readIndexFile(ctx context.Context, id ID) (*indexFile, error) {
	if s.cache != nil {
		if data, ok := s.cache.load(id); ok && s.hasher.Sum(data) == id {
			if f, err := decodeIndex(data); err == nil {
				return f, nil
			}
		}
	}
	data, err := backend.ReadAll(ctx, s.be, indexKey(id))
	if err != nil {
		return nil, fmt.Errorf("read index file %s: %w", id.Short(), err)
	}
	f, err := s.verifyIndex(id, data)
	if err != nil {
		return nil, err
	}
	if s.cache != nil {
		s.cache.store(id, data)
	}
	return f, nil
}
