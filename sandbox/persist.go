package sandbox

import (
	"fmt"
	"slices"
	"strings"
)

// validatePersist checks the persisted paths: absolute and clean, not "/",
// not in a directory the sandbox builds itself, not given twice. A path
// nested in another one is fine: it is kept inside the other's directory.
func validatePersist(paths []string) error {
	seen := map[string]bool{}
	for _, p := range paths {
		if err := validateSandboxPath("persisted path", p); err != nil {
			return err
		}
		if p == "/" {
			return fmt.Errorf("sandbox: cannot persist the whole root %q; persist directories such as /root or /usr/local: %w", p, ErrInvalid)
		}
		if underAny(p, reservedDirs) {
			return fmt.Errorf("sandbox: cannot persist %s: it is in %s, which the sandbox builds itself: %w",
				p, reservedDirs, ErrInvalid)
		}
		if seen[p] {
			return fmt.Errorf("sandbox: persisted path %s given twice: %w", p, ErrInvalid)
		}
		seen[p] = true
	}
	return nil
}

// persistPlan splits the persisted paths into the ones bound into the
// sandbox (no other persisted path above them), sorted, and all of them
// sorted parents first (the order they are seeded in). A nested path needs no
// bind of its own: its storage is inside its parent's, which is bound.
func persistPlan(paths []string) (binds, all []string) {
	all = slices.Clone(paths)
	slices.Sort(all) // "/a" < "/a/b": parents first
	for _, p := range all {
		nested := false
		for _, q := range binds {
			if under(p, q) {
				nested = true
				break
			}
		}
		if !nested {
			binds = append(binds, p)
		}
	}
	return binds, all
}

// persistRel is the storage of persisted path p, relative to the workspace
// root.
func persistRel(p string) string {
	return PersistDir + "/" + strings.TrimPrefix(p, "/")
}
