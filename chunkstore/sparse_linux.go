package chunkstore

import "golang.org/x/sys/unix"

const (
	haveSeekData = true
	seekData     = unix.SEEK_DATA
	seekHole     = unix.SEEK_HOLE
)
