package console

import (
	"net/http"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// recentFailures is how many failed calls the overview lists.
const recentFailures = 8

// overviewData is the overview page's model.
type overviewData struct {
	Stats    store.Stats
	Statuses []store.Status
	Queue    store.Queue
	Rates    rateChart
	Attempts attemptChart
	Failures []store.Call
	// Attention are the principal's calls that need an operator: failed
	// with code outcome_unknown (held by on_unknown: hold, or any other
	// whose outcome idemctl could not learn), to settle with idemctl
	// resolve.
	Attention []store.Call
	// Gates are the guarded tools (rate limits, breakers); OpenBreakers
	// counts those whose breaker is open or probing.
	Gates        []Gate
	OpenBreakers int
	// Now is when the page was read (UTC), shown as "updated".
	Now string
}

// overview is GET /ui: the queue, the rates of the last minutes, the
// attempt distribution (server-wide) and the principal's recent failures.
// console.js re-fetches the page and swaps its live parts.
func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	principal := principalOf(r)
	d := overviewData{Statuses: store.Statuses, Now: time.Now().UTC().Format("15:04:05")}
	var err error
	if d.Stats, err = c.cfg.Store.Stats(ctx); err != nil {
		c.storeError(w, r, err)
		return
	}
	if d.Queue, err = c.cfg.Store.Queue(ctx); err != nil {
		c.storeError(w, r, err)
		return
	}
	rates, err := c.cfg.Store.Rates(ctx, c.cfg.RateMinutes)
	if err != nil {
		c.storeError(w, r, err)
		return
	}
	d.Rates = newRateChart(rates)
	attempts, err := c.cfg.Store.Attempts(ctx)
	if err != nil {
		c.storeError(w, r, err)
		return
	}
	d.Attempts = newAttemptChart(attempts)
	if d.Failures, err = c.cfg.Store.ListCalls(ctx, store.ListFilter{
		Principal: &principal, Status: store.StatusFailed, Limit: recentFailures,
	}); err != nil {
		c.storeError(w, r, err)
		return
	}
	if d.Attention, err = c.cfg.Store.ListCalls(ctx, store.ListFilter{
		Principal: &principal, Status: store.StatusFailed, Code: wire.CodeOutcomeUnknown, Limit: recentFailures,
	}); err != nil {
		c.storeError(w, r, err)
		return
	}
	if c.cfg.Gates != nil {
		if d.Gates, err = c.cfg.Gates(ctx, principal); err != nil {
			c.storeError(w, r, err)
			return
		}
		for _, g := range d.Gates {
			if g.Open() {
				d.OpenBreakers++
			}
		}
	}
	c.render(w, r, http.StatusOK, "overview.html", page{Title: "Overview", Nav: "overview",
		Refresh: int(c.cfg.Refresh / time.Second), Data: d})
}
