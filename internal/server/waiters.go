package server

import "sync"

// waiters lets HTTP handlers holding a request under "Prefer: wait" learn
// that a call reached a final state in this process, without polling the
// database. It is a broadcaster keyed by call_id: every handler waiting on a
// call shares one channel, which the executor closes when the call's
// completion commits.
//
// Calls completed by another instance (shared PostgreSQL) never signal here;
// waiting handlers also re-read the store at a slow interval for that case.
type waiters struct {
	mu sync.Mutex
	m  map[string]*waitEntry
}

type waitEntry struct {
	ch   chan struct{}
	refs int
}

func newWaiters() *waiters {
	return &waiters{m: make(map[string]*waitEntry)}
}

// subscribe returns a channel closed at the next completion of callID and a
// release func the caller must call when it stops waiting (so entries of
// calls that never complete here do not accumulate). Subscribe before
// reading the call's state, so a completion between the read and the wait is
// not missed.
func (w *waiters) subscribe(callID string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[callID]
	if e == nil {
		e = &waitEntry{ch: make(chan struct{})}
		w.m[callID] = e
	}
	e.refs++
	var once sync.Once
	return e.ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			e.refs--
			// Only delete if the entry is still the current one: it may
			// already have been closed and replaced.
			if e.refs == 0 && w.m[callID] == e {
				delete(w.m, callID)
			}
		})
	}
}

// notify wakes everyone waiting on callID.
func (w *waiters) notify(callID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[callID]; e != nil {
		close(e.ch)
		delete(w.m, callID)
	}
}

// len is the number of calls being waited on (tests).
func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
