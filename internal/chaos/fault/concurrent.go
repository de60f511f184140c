package fault

// The concurrent scenario: many clients send the same key at once.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

var concurrent = scenario{
	name:  "concurrent",
	title: "many clients send the same key at the same moment; one call is recorded and one charge made",
	plan: []string{
		"make a temp dir and database; start `idemctl serve` on a free loopback port",
		"20 clients (--concurrency) wait at a barrier, then POST the same key conc-<unix time>, charge amount 100, with same-key retries",
		"the key's UNIQUE constraint and the write lock let exactly one insert win; every other request gets that call",
		"poll the call until final; print calls, effects, audit and dupes from the database, and /stats",
		"PASS when every client was answered with the same call_id, calls=1, effects=1",
	},
	run: runConcurrent,
}

func runConcurrent(ctx context.Context, e *env, rep *Report) error {
	srv, err := e.startServer(ctx, serverOpts{label: "server"})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	n := e.r.opts.Concurrency
	key := fmt.Sprintf("conc-%d", time.Now().Unix())
	e.logf("%d clients POST key %s (charge 100) at once", n, key)

	results := make([]client.Submission, n)
	errs := make([]error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		c, err := e.client(srv.URL, fmt.Sprintf("[client %02d] ", i))
		if err != nil {
			return err
		}
		wg.Go(func() {
			<-gate
			results[i], errs[i] = c.Submit(ctx, builtin.Charge, chargeArgs(100), client.WithKey(key))
		})
	}
	close(gate)
	wg.Wait()

	var answers []string
	var first client.Submission
	replayed := 0
	for i := range n {
		rep.Attempts += len(results[i].Attempts)
		answers = append(answers, answeredIDs(results[i])...)
		if errs[i] != nil {
			if err := noAnswer(ctx, rep, fmt.Sprintf("client %02d", i), errs[i]); err != nil {
				return err
			}
			continue
		}
		if results[i].Replayed {
			replayed++
		}
		if first.Call.CallID == "" {
			first = results[i]
		}
	}
	e.logf("%d clients answered, %d of them with an existing call (Idempotent-Replayed), %d distinct call id(s)",
		n-countErrs(errs), replayed, len(distinct(answers)))
	if first.Call.CallID != "" {
		c, err := e.client(srv.URL, "")
		if err != nil {
			return err
		}
		final, err := e.settle(ctx, c, first.Call)
		if err != nil {
			if err := notFinal(ctx, rep, first.Call.CallID, err); err != nil {
				return err
			}
		}
		answers = append(answers, final.CallID)
	}
	_, err = e.evidence(ctx, srv.URL, rep, expect{calls: 1, effects: 1}, answers)
	return err
}

func countErrs(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}
