// Command usermod checks the public client from outside idemctl's module:
// every type a user needs can be named here, and each call behaves as
// documented against the real server at IDEMCTL_BASE (which requires the
// token IDEMCTL_TOKEN). It prints one line per check and exits 1 if any
// failed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/idemctl/idemctl/client"
)

// Every exported type of the client, named the way a user's code would.
var (
	_ client.Call
	_ client.CallObject
	_ client.CallErrorObject
	_ client.Status = client.StatusSucceeded
	_ client.Tool
	_ client.ToolRetry
	_ client.ToolDedup
	_ client.ToolRate
	_ client.ToolBreaker
	_ client.BreakerState = client.BreakerOpen
	_ client.RedriveOptions
	_ client.Redriven
	_ client.Stats
	_ client.StatsBody
	_ *client.Queue
	_ client.Page
	_ client.ListOptions
	_ client.Submission
	_ client.AttemptRecord
	_ client.Option     = client.WithRetries(1)
	_ client.CallOption = client.WithSeq(1)
	_ *client.APIError
	_ *client.CallError
	_ *client.Client
)

type checker struct{ failed, passed int }

func (c *checker) check(name string, ok bool, format string, args ...any) {
	if ok {
		c.passed++
		fmt.Printf("ok   %s\n", name)
		return
	}
	c.failed++
	fmt.Printf("FAIL %s: %s\n", name, fmt.Sprintf(format, args...))
}

func main() {
	base, token := os.Getenv("IDEMCTL_BASE"), os.Getenv("IDEMCTL_TOKEN")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ck checker
	run(ctx, &ck, base, token)
	if ck.failed > 0 || ck.passed == 0 {
		fmt.Printf("usermod: %d of %d checks failed\n", ck.failed, ck.failed+ck.passed)
		os.Exit(1)
	}
	fmt.Printf("usermod: all %d checks passed\n", ck.passed)
}

func run(ctx context.Context, ck *checker, base, token string) {
	_, err := client.New("localhost:8081")
	ck.check("New refuses a base without a scheme", err != nil, "err = nil")

	stranger, err := client.New(base, client.WithToken("not-a-token-of-this-server-0123456789"))
	if err != nil {
		ck.check("New", false, "%v", err)
		return
	}
	_, err = stranger.Call(ctx, "charge", map[string]any{"amount": 1})
	var apiErr *client.APIError
	ck.check("a wrong token is ErrUnauthorized", errors.Is(err, client.ErrUnauthorized) &&
		errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized, "err = %v", err)

	var attempts []client.AttemptRecord
	c, err := client.New(base, client.WithToken(token), client.WithAttemptTimeout(5*time.Second),
		client.WithWaitTimeout(time.Minute), client.WithHTTPClient(&http.Client{}),
		client.WithOnAttempt(func(a client.AttemptRecord) { attempts = append(attempts, a) }))
	if err != nil {
		ck.check("New", false, "%v", err)
		return
	}

	key := client.NewKey()
	call, err := c.Call(ctx, "charge", map[string]any{"amount": 100}, client.WithKey(key), client.WithClientID("usermod"))
	ck.check("Call returns the final call", err == nil && call.Status == client.StatusSucceeded && call.IdemKey == key &&
		call.Final() && len(call.Raw) > 0, "call = %+v, err = %v", call.Call, err)
	ck.check("Call asked the server to hold its answer", len(attempts) == 1 && attempts[0].HTTP == http.StatusOK,
		"attempts = %+v", attempts)

	sub, err := c.Submit(ctx, "charge", map[string]any{"amount": 100}, client.WithKey(key))
	ck.check("the same key again is the same call, replayed", err == nil && sub.Replayed && sub.Call.CallID == call.CallID,
		"submission = %+v, err = %v", sub, err)

	_, err = c.Call(ctx, "charge", map[string]any{"amount": 200}, client.WithKey(key))
	ck.check("the same key with other args is ErrConflict naming the call", errors.Is(err, client.ErrConflict) &&
		errors.As(err, &apiErr) && apiErr.CallID == call.CallID && apiErr.Code == client.CodeIdempotencyConflict,
		"err = %v", err)

	failed, err := c.Call(ctx, "fail", map[string]any{"retryable": false, "message": "card declined"})
	var callErr *client.CallError
	ck.check("a failed call is a *CallError with its code and retryable", errors.As(err, &callErr) &&
		errors.Is(err, client.ErrCallFailed) && callErr.Code == client.CodeToolFailed && !callErr.Retryable &&
		callErr.Message == "card declined" && failed.Status == client.StatusFailed && callErr.Call.CallID == failed.CallID,
		"call = %+v, err = %v", failed.Call, err)
	var obj client.CallErrorObject
	ck.check("the failed call's error object decodes", json.Unmarshal(failed.Error, &obj) == nil && obj.Code == client.CodeToolFailed,
		"error = %s", failed.Error)

	got, err := c.Get(ctx, call.CallID)
	ck.check("Get", err == nil && got.CallID == call.CallID, "got %+v, %v", got.Call, err)
	got, err = c.GetByKey(ctx, key)
	ck.check("GetByKey", err == nil && got.CallID == call.CallID, "got %+v, %v", got.Call, err)
	_, err = c.Get(ctx, "c_0000000000000000")
	ck.check("a missing call is ErrNotFound", errors.Is(err, client.ErrNotFound), "err = %v", err)

	sub, err = c.Submit(ctx, "sleep", map[string]any{"seconds": 0.2}, client.WithCallPreferWait(0))
	ck.check("Submit without a hold answers before the end", err == nil && sub.HTTP == http.StatusAccepted && !sub.Call.Final(),
		"submission = %+v, err = %v", sub, err)
	waited, err := c.Wait(ctx, sub.Call.CallID)
	ck.check("Wait returns the final call", err == nil && waited.Status == client.StatusSucceeded, "call = %+v, err = %v", waited.Call, err)
	waited, err = c.WaitByKey(ctx, sub.Key)
	ck.check("WaitByKey finds it by the key", err == nil && waited.CallID == sub.Call.CallID, "call = %+v, err = %v", waited.Call, err)

	// Listing: the charges made here, newest first, over pages of 2.
	var made []string
	for range 3 {
		call, err := c.Call(ctx, "charge", map[string]any{"amount": 1})
		if err != nil {
			ck.check("Call", false, "%v", err)
			return
		}
		made = append(made, call.CallID)
	}
	var listed []string
	for call, err := range c.List(ctx, client.ListOptions{Tool: "charge", Limit: 2}) {
		if err != nil {
			ck.check("List", false, "%v", err)
			return
		}
		listed = append(listed, call.CallID)
	}
	ck.check("List iterates over every page, newest first", len(listed) == 4 && listed[0] == made[2] &&
		listed[1] == made[1] && listed[2] == made[0] && listed[3] == call.CallID, "listed %v, made %v then %s", listed, made, call.CallID)
	page, err := c.ListPage(ctx, client.ListOptions{Tool: "charge", Limit: 2})
	ck.check("ListPage returns one page and the cursor", err == nil && len(page.Calls) == 2 && page.Next != "",
		"page = %d calls, next %q, err %v", len(page.Calls), page.Next, err)

	long, err := c.Submit(ctx, "sleep", map[string]any{"seconds": 10}, client.WithCallPreferWait(0))
	if err != nil {
		ck.check("Submit", false, "%v", err)
		return
	}
	_, err = c.Cancel(ctx, long.Call.CallID)
	ck.check("Cancel", err == nil, "err = %v", err)
	ended, err := c.Wait(ctx, long.Call.CallID)
	ck.check("a canceled call ends failed with code canceled", errors.As(err, &callErr) && callErr.Code == client.CodeCanceled &&
		ended.Status == client.StatusFailed, "call = %+v, err = %v", ended.Call, err)
	_, err = c.Cancel(ctx, long.Call.CallID)
	ck.check("canceling an ended call is ErrAlreadyFinal", errors.Is(err, client.ErrAlreadyFinal), "err = %v", err)

	none, err := c.Redrive(ctx, client.RedriveOptions{Tool: "fail", DryRun: true})
	ck.check("Redrive leaves a definite failure alone without Force", err == nil && none.DryRun && len(none.Calls) == 0,
		"redriven = %d calls, err = %v", len(none.Calls), err)
	dry, err := c.Redrive(ctx, client.RedriveOptions{Tool: "fail", Force: true, DryRun: true})
	ck.check("Redrive with Force and DryRun lists the failed call, unchanged", err == nil && dry.DryRun && len(dry.Calls) == 1 &&
		dry.Calls[0].CallID == failed.CallID && dry.Calls[0].Status == client.StatusFailed,
		"redriven = %d calls, err = %v", len(dry.Calls), err)

	tools, err := c.Tools(ctx)
	var charge client.Tool
	for _, t := range tools {
		if t.Name == "charge" {
			charge = t
		}
	}
	ck.check("Tools lists charge", err == nil && charge.Effect, "tools = %+v, err = %v", tools, err)

	stats, err := c.Stats(ctx)
	ck.check("Stats counts one effect per charge", err == nil && stats.Effects == 4 && stats.Queue != nil,
		"stats = %s, err = %v", stats.Raw, err)
}
