package server

import "sync"

// byteBudget is a budget of bytes that is never waited for: take succeeds
// or refuses at once (a refused request is answered 503 overloaded, not
// queued, so waiting requests cannot pile up their bodies in memory).
type byteBudget struct {
	max  int64
	mu   sync.Mutex
	used int64
}

// take reserves n bytes; false means that would pass the budget.
func (b *byteBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes taken.
func (b *byteBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}
