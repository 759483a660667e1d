package chunkstore

// WaitCacheScan waits until s's blob cache has scanned its directory at
// Open, so that its stats count every file.
func WaitCacheScan(s *Store) {
	if s.rd.cache != nil {
		<-s.rd.cache.scanned
	}
}

// WaitFetches waits for s's background fetches and cache inserts. Nothing
// else may read from s meanwhile.
func WaitFetches(s *Store) { s.rd.bg.Wait() }
