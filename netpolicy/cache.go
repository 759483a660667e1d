package netpolicy

import (
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

type cacheKey struct {
	name  string
	qtype uint16
}

// cached is a filtered answer whose addresses were allowed when it was
// stored, for at least its TTL: serving it again needs no map update (the
// map entries outlive the answer's TTLs, see Forwarder.allow).
type cached struct {
	msg             *dns.Msg
	addrs, stripped []netip.Addr
	stored          time.Time
	ttl             time.Duration
}

// age is how many whole seconds the answer has been cached.
func (c *cached) age(now time.Time) uint32 { return uint32(now.Sub(c.stored) / time.Second) }

// answerCache is the forwarder's small positive cache.
type answerCache struct {
	mu  sync.Mutex
	max int // < 0: off
	m   map[cacheKey]*cached
}

func newAnswerCache(max int) *answerCache {
	return &answerCache{max: max, m: map[cacheKey]*cached{}}
}

func (c *answerCache) get(k cacheKey, now time.Time) (*cached, bool) {
	if c.max < 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, false
	}
	if now.Sub(e.stored) >= e.ttl {
		delete(c.m, k)
		return nil, false
	}
	return e, true
}

func (c *answerCache) put(k cacheKey, e *cached) {
	if c.max < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k2, e2 := range c.m {
			if e.stored.Sub(e2.stored) >= e2.ttl {
				delete(c.m, k2)
			}
		}
		for k2 := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k2) // an arbitrary one
		}
	}
	c.m[k] = e
}

func (c *answerCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}
