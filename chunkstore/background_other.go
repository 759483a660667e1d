//go:build !linux

package chunkstore

// setThreadNice does nothing: elsewhere a thread's priority is not its own.
func setThreadNice(int) (int, bool) { return 0, false }

func resetThreadNice(int) bool { return true }

func threadNice() (int, error) { return 0, nil }
