package journal

// SetAfterCut makes Snapshot call f right after its cut, once the journal's
// lock is released and before the snapshot reads anything (nil: none).
func SetAfterCut(f func()) { afterCut = f }
