package fault

import (
	"context"
	"errors"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// pollTimeout bounds waiting for a call to become final.
const pollTimeout = 15 * time.Second

func chargeArgs(amount int64) map[string]any { return map[string]any{"amount": amount} }

// settle polls the call the client was answered with until it is final,
// and prints it as the scenario's final call line.
func (e *env) settle(ctx context.Context, c *client.Client, call client.Call) (client.Call, error) {
	if !call.Final() {
		var err error
		// A failed call is an end like any other here: the evidence
		// judges it.
		if call, err = c.Wait(ctx, call.CallID); err != nil && !errors.Is(err, client.ErrCallFailed) {
			return call, err
		}
	}
	e.logf("final call (polled until succeeded or failed):")
	e.printJSON("", call)
	return call, nil
}

// chargeAndSettle makes the scenarios' one logical call (charge 100 under
// key) and waits for its final state. It returns the client's result and
// the call ids the client was answered with; a missing answer or a call that
// never settles is recorded on rep (the error is non-nil only when the
// scenario must stop).
func (e *env) chargeAndSettle(ctx context.Context, rep *Report, c *client.Client, key string) (client.Submission, []string, error) {
	res, callErr := c.Submit(ctx, builtin.Charge, chargeArgs(100), client.WithKey(key))
	answers := answeredIDs(res)
	if callErr != nil {
		return res, answers, noAnswer(ctx, rep, "the client", callErr)
	}
	final, err := e.settle(ctx, c, res.Call)
	if err != nil {
		if err := notFinal(ctx, rep, res.Call.CallID, err); err != nil {
			return res, answers, err
		}
	}
	return res, append(answers, final.CallID), nil
}

// noAnswer records a client that ended without an answer, or returns the
// context's error when the run was cancelled.
func noAnswer(ctx context.Context, rep *Report, who string, err error) error {
	return failUnlessCancelled(ctx, rep, "%s got no answer: %v", who, err)
}

// notFinal records a call that did not become final, or returns the
// context's error when the run was cancelled.
func notFinal(ctx context.Context, rep *Report, callID string, err error) error {
	return failUnlessCancelled(ctx, rep, "invariant 4: call %s did not become final: %v", callID, err)
}

// failUnlessCancelled records a failure, unless the run was cancelled: then
// nothing was disproved, and the context's error ends the scenario.
func failUnlessCancelled(ctx context.Context, rep *Report, format string, args ...any) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.fail(format, args...)
	return nil
}

func firstEvent(events []store.AuditEvent, name string) *store.AuditEvent {
	for i := range events {
		if events[i].Event == name {
			return &events[i]
		}
	}
	return nil
}

// firstClaim is the first audit row that claims the call (store.ClaimOf:
// a claimed row, or a created row of a call claimed at creation).
func firstClaim(events []store.AuditEvent) *store.AuditEvent {
	for i := range events {
		if _, ok := store.ClaimOf(events[i]); ok {
			return &events[i]
		}
	}
	return nil
}

func countEvents(events []store.AuditEvent, name string) int {
	n := 0
	for _, ev := range events {
		if ev.Event == name {
			n++
		}
	}
	return n
}
