package soak

// The workload: client goroutines, each drawing its operations from its own
// generator and sending them through the public client, one HTTP request
// per client.Submit (WithRetries(0)), so that every physical request is in the
// history with its start, end and answer. The soak does the same-key
// retrying itself, the way the client package would.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/ctxutil"
)

const (
	// sendAttempts bounds the requests of one operation: enough to ride
	// out a restart (backoff 100 ms, 200 ms, ... capped at 1 s).
	sendAttempts = 8
	// attemptTimeout bounds one request; one with Prefer: wait gets
	// preferWait on top (the client adds the hold).
	attemptTimeout = 3 * time.Second
	preferWait     = time.Second
)

// target is how the workload reaches the instances: one client per
// instance, plain and with Prefer: wait.
type target struct {
	plain, wait []*client.Client
}

func newTarget(urls []string, opts ...client.Option) (*target, error) {
	t := &target{}
	// Retries 0: the workload retries itself, so that every physical
	// request is in the history.
	common := slices.Concat([]client.Option{client.WithHTTPClient(&http.Client{}),
		client.WithAttemptTimeout(attemptTimeout), client.WithRetries(0)}, opts)
	for _, u := range urls {
		plain, err := client.New(u, slices.Concat(common, []client.Option{client.WithPreferWait(0)})...)
		if err != nil {
			return nil, err
		}
		wait, err := client.New(u, slices.Concat(common, []client.Option{client.WithPreferWait(preferWait)})...)
		if err != nil {
			return nil, err
		}
		t.plain, t.wait = append(t.plain, plain), append(t.wait, wait)
	}
	return t, nil
}

// counters are the workload's figures.
type counters struct {
	ops         [4]atomic.Int64 // by OpKind
	retryAcked  atomic.Int64    // same-key retries of an acknowledged key
	retryUnansw atomic.Int64    // ... of a key never answered 2xx so far
}

// sender sends one operation's requests and records them.
type sender struct {
	hist *History
	t    *target
	// hard ends everything at once (Ctrl-C); the load's own end only stops
	// new operations, so that none is cut off mid-request.
	hard context.Context
}

// send sends key with payload until an answer that is not "try later" or
// sendAttempts requests; it reports whether a 2xx came.
func (s *sender) send(clientNo int, op OpKind, key string, p Payload, v Variant, inst int, wait, acked bool) bool {
	return s.sendN(clientNo, op, key, p, v, inst, wait, acked, sendAttempts)
}

// sendN is send with at most tries requests.
func (s *sender) sendN(clientNo int, op OpKind, key string, p Payload, v Variant, inst int, wait, acked bool, tries int) bool {
	n := len(s.t.plain)
	for attempt := range tries {
		i := (inst + attempt) % n
		c := s.t.plain[i]
		if wait {
			c = s.t.wait[i]
		}
		a := Attempt{Client: clientNo, Op: op, Key: key, Variant: v, Instance: i, Acked: acked, Start: s.hist.Now()}
		res, err := c.Submit(s.hard, p.Tool, p.Args, client.WithKey(key))
		a.End = s.hist.Now()
		if len(res.Attempts) > 0 {
			r := res.Attempts[len(res.Attempts)-1]
			a.HTTP, a.Code, a.CallID, a.Status, a.Err = r.HTTP, r.Code, r.CallID, r.Status, r.Error
		} else if err != nil {
			a.Err = err.Error()
		}
		if a.Answered() && a.Code == "" && !a.OK() {
			a.Code = fmt.Sprintf("http_%d", a.HTTP)
		}
		s.hist.Record(a)
		if a.OK() {
			return true
		}
		if s.hard.Err() != nil {
			return false
		}
		if a.Answered() && !retryLater(a) {
			return false // a verdict (409, 400, 500): the same request gets the same answer
		}
		if attempt == tries-1 {
			break
		}
		if err := ctxutil.Sleep(s.hard, client.Backoff(attempt)); err != nil {
			return false
		}
	}
	return false
}

// retryLater reports the answers a client retries with the same key.
func retryLater(a Attempt) bool {
	return a.HTTP == http.StatusRequestTimeout || a.HTTP == http.StatusTooManyRequests || a.HTTP == http.StatusServiceUnavailable
}

// runClient runs client number no until stop is closed.
func (s *sender) runClient(no int, gen *Generator, prefix string, stop <-chan struct{}, cnt *counters) {
	var keys, acked []string
	payloads := map[string]Payload{}
	isAcked := map[string]bool{}
	for seq := 0; ; seq++ {
		tries := sendAttempts
		select {
		case <-stop:
			return
		case <-s.hard.Done():
			return
		default:
		}
		op := gen.Next()
		kind := op.Kind
		if kind == OpRetry && len(keys) == 0 || kind == OpConflict && len(acked) == 0 {
			kind = OpNew // nothing to retry yet: the plan's choice waits for a key
		}
		cnt.ops[kind].Add(1)
		if op.Once {
			tries = 1
		}
		switch kind {
		case OpNew:
			key := fmt.Sprintf("%s-c%d-%d", prefix, no, seq)
			keys = append(keys, key)
			p := WithRef(op.Payload, key)
			payloads[key] = p
			s.hist.AddKey(key, p)
			if s.sendN(no, OpNew, key, p, Same, op.Instance, op.Wait, false, tries) {
				isAcked[key] = true
				acked = append(acked, key)
			}
		case OpRetry:
			key := keys[op.Pick%len(keys)]
			was := isAcked[key]
			if was {
				cnt.retryAcked.Add(1)
			} else {
				cnt.retryUnansw.Add(1)
			}
			if s.sendN(no, OpRetry, key, payloads[key], Same, op.Instance, op.Wait, was, tries) && !was {
				isAcked[key] = true
				acked = append(acked, key)
			}
		case OpConflict:
			key := acked[op.Pick%len(acked)]
			s.sendN(no, OpConflict, key, Other(payloads[key]), Different, op.Instance, false, true, tries)
		}
	}
}

// runLoad runs clients goroutines until stop is closed and returns when
// each has finished its operation in flight.
func runLoad(hard context.Context, hist *History, t *target, seed uint64, clients int, withHTTP bool, prefix string, stop <-chan struct{}) *counters {
	s := &sender{hist: hist, t: t, hard: hard}
	cnt := &counters{}
	var wg sync.WaitGroup
	for no := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runClient(no, NewGenerator(seed, no, withHTTP), prefix, stop, cnt)
		}()
	}
	wg.Wait()
	return cnt
}
