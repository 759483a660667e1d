//go:build !linux

package snapio

import (
	"context"
	"errors"
)

// fromDir needs Linux's lstat, xattr and SEEK_DATA calls.
func (b *builder) fromDir(ctx context.Context, dir string) error {
	return errors.New("importing a directory is only supported on Linux; import a tar archive instead")
}
