package fault

// The duplicate-request scenario: the network delivers a request twice.

import (
	"context"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/chaos"
)

var duplicateRequest = scenario{
	name:  "duplicate-request",
	title: "the network delivers the request twice (proxy duplicate-request); the server records one call and charges once",
	plan: []string{
		"make a temp dir and database; start `idemctl serve` on a free loopback port",
		"start the chaos proxy in front of it: --mode duplicate-request --first 1",
		"client through the proxy: key dup-<unix time>, charge amount 100",
		"the server receives two physical requests with the same key at the same moment; the second finds the first's call",
		"poll the call until final; print calls, effects, audit and dupes from the database, and /stats",
		"PASS when the proxy delivered the request twice and calls=1, effects=1",
	},
	run: runDuplicate,
}

func runDuplicate(ctx context.Context, e *env, rep *Report) error {
	srv, err := e.startServer(ctx, serverOpts{label: "server"})
	if err != nil {
		return err
	}
	e.logf("server: %s (pid %d)", srv.CommandLine(), srv.Pid())
	proxy, base, err := e.startProxy(ctx, srv.URL, chaos.ModeDuplicateRequest, chaos.First(1))
	if err != nil {
		return err
	}
	key := fmt.Sprintf("dup-%d", time.Now().Unix())
	c, err := e.client(base, "")
	if err != nil {
		return err
	}
	e.logf("client: idemctl call --base %s --key %s --amount 100", base, key)
	res, answers, err := e.chargeAndSettle(ctx, rep, c, key)
	rep.Attempts = len(res.Attempts)
	if err != nil {
		return err
	}
	if _, hits := proxy.Counts(); hits != 1 {
		rep.fail("the fault did not happen as planned: %d request(s) duplicated, want 1", hits)
	}
	_, err = e.evidence(ctx, srv.URL, rep, expect{calls: 1, effects: 1}, answers)
	return err
}
