package chunkstore

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/local"
	"github.com/cairnfs/cairn/chunkstore/backend/s3"
)

// OpenBackend opens the backend a store URL names:
//
//	/path/to/store, ./rel, file:///path   a local directory
//	s3://BUCKET[/PREFIX]?endpoint=URL&region=R&path_style=true   an S3 bucket
//
// create makes a local directory that does not exist yet (for init).
func OpenBackend(ctx context.Context, raw string, create bool) (backend.Backend, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: empty store URL", ErrInvalid)
	}
	switch {
	case strings.HasPrefix(raw, "s3://"):
		cfg, err := s3.ParseURL(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return s3.Open(ctx, cfg)
	case strings.HasPrefix(raw, "file://"):
		u, err := url.Parse(raw)
		if err != nil || u.Host != "" && u.Host != "localhost" || u.Path == "" {
			return nil, fmt.Errorf("%w: store URL %q: want file:///ABSOLUTE/PATH", ErrInvalid, raw)
		}
		return local.Open(u.Path, local.Options{Create: create})
	case strings.Contains(raw, "://"):
		scheme, _, _ := strings.Cut(raw, "://")
		return nil, fmt.Errorf("%w: store URL %q: unknown scheme %q; use a directory path, file:///PATH or s3://BUCKET/PREFIX", ErrInvalid, raw, scheme)
	}
	return local.Open(filepath.Clean(raw), local.Options{Create: create})
}
