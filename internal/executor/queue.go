package executor

import (
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// queueGauge is this server's view of the pending queue, for the
// back-pressure of new keys (the server's MaxPending; docs/operations.md,
// "Limits"). A new key is checked against it on every request, so it must
// cost nothing: no COUNT per request. The scheduler reads the count from
// the store (store.Queue, an index of pending calls) at most once per
// scheduler interval, and between reads the gauge adds the calls this
// server made pending (created, retry reset) and subtracts those it
// claimed.
//
// How exact it is: on one instance, within a few calls of the truth (a
// create racing with a read may be counted twice until the next read). With
// several instances on one database, each sees the others' creates and
// claims only at its next read, so the queue may exceed MaxPending by about
// what the other instances accept in one interval (200 ms by default), and
// a server may refuse for up to one interval after others drained the
// queue. It never refuses on a count it could not read: until the first
// read succeeds, it takes the queue as empty.
type queueGauge struct {
	mu    sync.Mutex
	read  store.Queue // the last count read from the store
	at    time.Time   // when it was read; zero before the first read
	delta int64       // pending calls this server added, minus those it claimed, since
	// covered is the limit of the claim round in flight (0: none): as
	// many pending calls as that are being claimed, not waiting (waiting).
	covered int64
}

// cover records the limit of the claim round starting (n), or its end
// (0).
func (q *queueGauge) cover(n int) {
	q.mu.Lock()
	q.covered = int64(n)
	q.mu.Unlock()
}

// waiting is the estimated number of pending calls that no claim round
// in flight will take: what a new call claimed at creation would
// overtake (Reserve).
func (q *queueGauge) waiting() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return max(0, q.read.Pending+q.delta-q.covered)
}

// due reports whether the count should be read again: the last read is at
// least every old. It does not wait.
func (q *queueGauge) due(every time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.at.IsZero() || time.Since(q.at) >= every
}

// set records a count just read.
func (q *queueGauge) set(read store.Queue) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.read, q.at, q.delta = read, time.Now(), 0
}

// added counts a call this server made pending (a new key, a retry reset).
func (q *queueGauge) added() { q.move(1) }

// claimed counts calls this server claimed.
func (q *queueGauge) claimed(n int) { q.move(-int64(n)) }

func (q *queueGauge) move(n int64) {
	q.mu.Lock()
	q.delta += n
	q.mu.Unlock()
}

// pending is the estimated number of pending calls now.
func (q *queueGauge) pending() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return max(0, q.read.Pending+q.delta)
}
