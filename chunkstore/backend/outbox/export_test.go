package outbox

// Crash stops b as a crash of its process would: uploads stop, nothing
// held in memory is written, nothing is synced. (Fault injection for the
// tests: the files stay as they are.)
func (b *Backend) Crash() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}
