package fault

// The drop-response scenario: a reply lost after the server acted.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/chaos"
	"github.com/idemctl/idemctl/internal/clientknob"
)

var dropResponse = scenario{
	name:  "drop-response",
	title: "the server runs the charge, but the proxy drops its first reply; the client times out and retries with the same key",
	plan: []string{
		"make a temp dir and database; start `idemctl serve` (the same binary) on a free loopback port",
		"start the chaos proxy in front of it: --mode drop-response --first 1",
		"client through the proxy: key drop-<unix time>, charge amount 100, --attempt-timeout 1s --retries 3",
		"attempt 1 reaches the server, which records and runs the charge; the reply is dropped, the client reports \"timed out\"",
		"attempt 2 carries the same key: the server answers with the original call instead of charging again",
		"poll the call until final; print calls, effects, audit and dupes from the database, and /stats",
		"PASS when calls=1, effects=1, no dupes, every call final, and every answer named the same call",
	},
	run:      func(ctx context.Context, e *env, rep *Report) error { return runDrop(ctx, e, rep, false) },
	contrast: func(ctx context.Context, e *env, rep *Report) error { return runDrop(ctx, e, rep, true) },
}

func runDrop(ctx context.Context, e *env, rep *Report, newKey bool) error {
	srv, err := e.startServer(ctx, serverOpts{label: "server"})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	proxy, base, err := e.startProxy(ctx, srv.URL, chaos.ModeDropResponse, chaos.First(1))
	if err != nil {
		return err
	}
	key := fmt.Sprintf("drop-%d", time.Now().Unix())
	c, err := e.client(base, "")
	if err != nil {
		return err
	}
	cctx, flag := ctx, ""
	if newKey {
		cctx, flag = clientknob.WithNewKeyOnRetry(ctx), " --new-key-on-retry"
	}
	e.logf("client: idemctl call --base %s --key %s --amount 100 --attempt-timeout %s%s", base, key, e.r.opts.ClientTimeout, flag)

	res, answers, err := e.chargeAndSettle(cctx, rep, c, key)
	rep.Attempts = len(res.Attempts)
	if err != nil {
		return err
	}
	if newKey {
		// The dropped first key's call runs on without the client; wait
		// for it too, so the counts include its charge.
		direct, err := client.New(srv.URL, client.WithWaitTimeout(pollTimeout))
		if err != nil {
			return err
		}
		for _, a := range res.Attempts {
			if _, err := direct.WaitByKey(ctx, a.Key); err != nil && !errors.Is(err, client.ErrCallFailed) && ctx.Err() == nil {
				e.logf("key %s: %v", a.Key, err)
			}
		}
	}
	if _, hits := proxy.Counts(); hits != 1 || len(res.Attempts) < 2 || res.Attempts[0].HTTP != 0 {
		rep.fail("the fault did not happen as planned: %d reply dropped, %d attempt(s), first attempt %+v",
			hits, len(res.Attempts), firstAttempt(res))
	}

	want := expect{calls: 1, effects: 1}
	if newKey {
		want = expect{calls: 2, effects: 2}
	}
	if _, err := e.evidence(ctx, srv.URL, rep, want, answers); err != nil {
		return err
	}
	if newKey {
		rep.Verdict = Demo
		if len(rep.Failures) > 0 {
			rep.Verdict = NotReproduced
		}
	}
	return nil
}

func firstAttempt(res client.Submission) client.AttemptRecord {
	if len(res.Attempts) == 0 {
		return client.AttemptRecord{}
	}
	return res.Attempts[0]
}
