package toolreg

import (
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// TestParseGates: rate and breaker are read with their defaults, on every
// kind, and listed without their state.
func TestParseGates(t *testing.T) {
	t.Parallel()
	r, err := Parse([]byte(`
tools:
  - {name: charge, kind: builtin, rate: {limit: 50, per: 2s, burst: 10}, breaker: {failures: 3, cooldown: 1m, fail_fast: true}}
  - {name: send_email, kind: builtin, rate: {limit: 7}, breaker: {}}
  - {name: hook, kind: http, url: "http://127.0.0.1:1/x"}
`), env())
	if err != nil {
		t.Fatal(err)
	}
	charge, _ := r.Lookup("charge")
	if *charge.Rate != (store.Rate{Limit: 50, Per: 2 * time.Second, Burst: 10}) ||
		*charge.Breaker != (store.Breaker{Failures: 3, Cooldown: time.Minute, FailFast: true}) {
		t.Errorf("charge: rate %+v breaker %+v", *charge.Rate, *charge.Breaker)
	}
	echo, _ := r.Lookup("send_email")
	if *echo.Rate != (store.Rate{Limit: 7, Per: time.Second, Burst: 1}) ||
		*echo.Breaker != (store.Breaker{Failures: 5, Cooldown: 30 * time.Second}) {
		t.Errorf("send_email defaults: rate %+v breaker %+v", *echo.Rate, *echo.Breaker)
	}
	hook, _ := r.Lookup("hook")
	if g := hook.Gate(); g.Guarded() {
		t.Errorf("a tool with neither is guarded: %+v", g)
	}
	l := charge.listing()
	if l.Rate == nil || l.Rate.Per != "2s" || l.Rate.Burst != 10 || l.Breaker == nil || l.Breaker.Cooldown != "1m0s" ||
		!l.Breaker.FailFast || l.Breaker.State != store.BreakerClosed {
		t.Errorf("listing: rate %+v breaker %+v", l.Rate, l.Breaker)
	}
}

// TestParseGateErrors: each bad rate or breaker value is refused naming
// the tool and the field.
func TestParseGateErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ field, want string }{
		{`rate: 5`, `tools[0] (charge): rate: must be a mapping with limit, per, burst`},
		{`rate: {per: 1s}`, `rate.limit: required`},
		{`rate: {limit: 0}`, `rate.limit: must be an integer from 1 to 1000000, got 0`},
		{`rate: {limit: "ten"}`, `rate.limit: must be an integer from 1 to 1000000, got "ten"`},
		{`rate: {limit: 5, per: 0s}`, `rate.per: "0s" must be a duration above 0`},
		{`rate: {limit: 5, per: 48h}`, `rate.per: "48h" must be a duration above 0 and at most 24h0m0s`},
		{`rate: {limit: 5, per: 5}`, `rate.per: 5 is not a duration`},
		{`rate: {limit: 5, burst: 0}`, `rate.burst: must be an integer from 1`},
		{`rate: {limit: 5, every: 1s}`, `rate.every: unknown field (allowed: limit, per, burst)`},
		{`breaker: []`, `breaker: must be a mapping with failures, cooldown, fail_fast`},
		{`breaker: {failures: 0}`, `breaker.failures: must be an integer from 1 to 1000, got 0`},
		{`breaker: {cooldown: forever}`, `breaker.cooldown: "forever" is not a duration`},
		{`breaker: {cooldown: 2h}`, `breaker.cooldown: "2h" must be above 0 and at most 1h0m0s`},
		{`breaker: {fail_fast: "yes"}`, `breaker.fail_fast: must be true or false, got "yes"`},
		{`breaker: {failures: 2, open_for: 1s}`, `breaker.open_for: unknown field`},
	} {
		_, err := Parse([]byte("tools:\n  - {name: charge, kind: builtin, "+tc.field+"}\n"), env())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.field, err, tc.want)
		}
	}
}
