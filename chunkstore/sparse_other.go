//go:build !linux

package chunkstore

// Elsewhere the whence values differ or do not exist: DataRanges reports
// every file as all data.
const (
	haveSeekData = false
	seekData     = 0
	seekHole     = 0
)
