package landlock

import (
	"fmt"
	"path/filepath"
)

// Rule allows access beneath one path. Read access (read files, list
// directories, execute) is always granted; Write adds every other right:
// write, truncate, create, remove, rename and link.
type Rule struct {
	// Path is an absolute path to a directory (the rule covers everything
	// beneath it) or to a single file. It must exist when Restrict runs.
	Path string
	// Write grants write access beneath Path in addition to read access.
	// Default false: read-only.
	Write bool
}

// validate checks the rule's shape; whether the path exists is checked when
// it is opened.
func (r Rule) validate() error {
	if r.Path == "" {
		return fmt.Errorf("landlock: rule with an empty path: %w", ErrInvalid)
	}
	if !filepath.IsAbs(r.Path) {
		return fmt.Errorf("landlock: rule path %q is not absolute: %w", r.Path, ErrInvalid)
	}
	return nil
}
