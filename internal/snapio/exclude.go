package snapio

import (
	"fmt"
	"path"
	"strings"

	"github.com/cairnfs/cairn/chunkstore"
)

// excluder matches --exclude patterns.
type excluder struct{ patterns []string }

// newExcluder checks the patterns (path.Match syntax; a trailing '/' and a
// leading "./" are dropped, so "node_modules/" works).
func newExcluder(patterns []string) (excluder, error) {
	var x excluder
	for _, p := range patterns {
		clean := strings.TrimPrefix(strings.TrimRight(p, "/"), "./")
		if clean == "" {
			return x, fmt.Errorf("%w: --exclude %q matches nothing (an empty pattern)", chunkstore.ErrInvalid, p)
		}
		if _, err := path.Match(clean, ""); err != nil {
			return x, fmt.Errorf("%w: --exclude %q: %v", chunkstore.ErrInvalid, p, err)
		}
		x.patterns = append(x.patterns, clean)
	}
	return x, nil
}

// match returns the first pattern that matches rel (a slash-separated path
// relative to the root) or its base name.
func (x excluder) match(rel string) (string, bool) {
	base := path.Base(rel)
	for _, p := range x.patterns {
		if ok, _ := path.Match(p, rel); ok {
			return p, true
		}
		if ok, _ := path.Match(p, base); ok {
			return p, true
		}
	}
	return "", false
}

// matchPrefix reports the shortest prefix of rel (rel itself included)
// that a pattern excludes: the path that was left out, with its subtree.
func (x excluder) matchPrefix(rel string) (prefix, pattern string, ok bool) {
	if len(x.patterns) == 0 {
		return "", "", false
	}
	for i := 0; i <= len(rel); i++ {
		if i == len(rel) || rel[i] == '/' {
			if p, ok := x.match(rel[:i]); ok {
				return rel[:i], p, true
			}
		}
	}
	return "", "", false
}
