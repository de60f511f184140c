package server

import (
	"bytes"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// The replay cache (docs/api.md, "Replays from memory") answers a POST
// that repeats, byte for byte, the body of an earlier POST with the same
// principal and key whose call had succeeded, without parsing the body or
// asking the store. It is exact because of what it holds and for how long:
//
//   - Only succeeded calls. Succeeded is final: no transaction of either
//     backend changes such a row again (cancel answers already_final,
//     resolve and redrive take failed calls only); only the retention
//     purge deletes it. A failed call may be reset, redriven or resolved,
//     and a pending or running one changes, so neither is cached.
//   - Only an answer the full path has just given to the same principal,
//     key and body bytes: the same bytes parse to the same request, with
//     the same fingerprint, so the full path would find the same call and
//     answer the same way again. A body that differs in any byte (another
//     spelling of the same request, or a conflicting one) takes the full
//     path, which decides replay or 409 as always.
//   - Not past what the database says: an entry lives ttl at most, and
//     never past half the retention after the call's last update (by this
//     host's clock; the purge deletes a call a whole retention after it,
//     by the database's), so every entry has expired before any instance
//     on the database can purge its call. A purged key then answers 410 or
//     is new again exactly as without the cache.
//   - Not past a change of the tool registry: a refresh of the tools of
//     upstream MCP servers may turn the same body into a refusal, so it
//     clears the cache, and an answer computed before it is not stored
//     after it (gen).
//
// A crash loses the cache and nothing else: it holds only copies of
// committed rows.
type replayCache struct {
	ttl time.Duration
	// retention is the server's (0: calls are kept for ever).
	retention time.Duration
	// maxEntries and maxAnswer bound the memory: at most maxEntries
	// answers of at most maxAnswer bytes each; a larger answer is not
	// cached.
	maxEntries int
	maxAnswer  int
	now        func() time.Time // time.Now; tests move it

	mu      sync.RWMutex
	gen     uint64 // bumped by clear, under mu
	entries map[replayKey]*replayEntry
}

// Bounds of the replay cache (docs/api.md, "Replays from memory").
const (
	// replayTTL is how long an entry is served at most. A storm of
	// retries repeats a request many times a second: a few seconds serve
	// nearly all of it from memory, and keep the entry far inside the
	// shortest retention the cache runs with.
	replayTTL = 5 * time.Second
	// replayMinRetention is the shortest retention the cache runs with:
	// below it an entry's bound (half the retention after the call's last
	// update) would depend on this host's clock agreeing with the
	// database's to within a fraction of a second.
	replayMinRetention = time.Minute
	// replayMaxEntries and replayMaxAnswer bound the cache to about
	// 4 MiB of answers.
	replayMaxEntries = 2048
	replayMaxAnswer  = 2 << 10
)

type replayKey struct{ principal, key string }

// replayEntry is what a replay of a succeeded call answers.
type replayEntry struct {
	sum    [sha256.Size]byte // of the request body that got this answer
	callID string
	tool   string
	answer []byte // the body the full path sent: the call object's JSON and a newline
	// expires is checked by both clocks: the monotonic one, which a step
	// of the wall clock does not move, and the wall clock (wallExpires),
	// which a suspended machine's monotonic clock does not see pass.
	expires, wallExpires time.Time
}

// newReplayCache is the cache of a server with this retention; nil (no
// cache) when the retention is too short for the bound above.
func newReplayCache(retention time.Duration) *replayCache {
	if retention > 0 && retention < replayMinRetention {
		return nil
	}
	return &replayCache{ttl: replayTTL, retention: retention, maxEntries: replayMaxEntries,
		maxAnswer: replayMaxAnswer, now: time.Now, entries: map[replayKey]*replayEntry{}}
}

// generation is read before a request is checked against the registry and
// given back to put, which stores nothing if the registry changed since.
func (c *replayCache) generation() uint64 {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.gen
}

// get is the answer for principal's key and a body with this sum, if one
// is cached and has not expired.
func (c *replayCache) get(principal, key string, sum [sha256.Size]byte) *replayEntry {
	if c == nil {
		return nil
	}
	c.mu.RLock()
	e := c.entries[replayKey{principal, key}]
	c.mu.RUnlock()
	if e == nil || e.sum != sum {
		return nil
	}
	if now := c.now(); !now.Before(e.expires) || !now.Round(0).Before(e.wallExpires) {
		return nil
	}
	return e
}

// put stores answer, what the full path answered a replay of call
// (principal's key, a body with this sum), if call has succeeded, the
// answer is small enough and the registry is still at gen.
func (c *replayCache) put(gen uint64, principal, key string, sum [sha256.Size]byte, call store.Call, answer []byte) {
	if c == nil || call.Status != store.StatusSucceeded || len(answer) == 0 || len(answer) > c.maxAnswer {
		return
	}
	now := c.now()
	expires := now.Add(c.ttl)
	if c.retention > 0 {
		updated := time.Unix(0, int64(call.UpdatedAt*1e9))
		if bound := updated.Add(c.retention / 2); bound.Before(expires) {
			expires = bound
		}
	}
	if !now.Before(expires) {
		return
	}
	e := &replayEntry{sum: sum, callID: call.CallID, tool: call.Tool, answer: bytes.Clone(answer),
		expires: expires, wallExpires: expires.Round(0)}
	k := replayKey{principal, key}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.maxEntries {
		c.evict(now)
	}
	c.entries[k] = e
}

// evict makes room for one entry: the expired ones go, and if none had,
// an arbitrary one (map order). Called under mu, when full.
func (c *replayCache) evict(now time.Time) {
	for k, e := range c.entries {
		if !now.Before(e.expires) || !now.Round(0).Before(e.wallExpires) {
			delete(c.entries, k)
		}
	}
	for k := range c.entries {
		if len(c.entries) < c.maxEntries {
			return
		}
		delete(c.entries, k)
	}
}

// clear drops every entry, and every answer being computed (gen).
func (c *replayCache) clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.entries = map[replayKey]*replayEntry{}
}

// len is the number of entries, expired ones included.
func (c *replayCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
