package soak

// Reading the outcome back: from the database through the store seam
// (internal/store/backend opens SQLite or PostgreSQL, read-only), or, for
// --base, over the API (GET /stats and by-key lookups).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/ctxutil"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/backend"
	"github.com/idemctl/idemctl/internal/wire"
)

// observer reads the calls' state: the database, or the API.
type observer interface {
	// busy counts the calls not yet final (whole database or deployment).
	busy(ctx context.Context) (int64, error)
	// observe reads the calls of keys and what else the mode can see.
	observe(ctx context.Context, keys []KeyInfo) (Observed, error)
	close()
}

// drain waits until nothing is pending or running, up to timeout; it
// returns how long that took and whether it happened.
func drain(ctx context.Context, o observer, timeout time.Duration) (time.Duration, bool, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	var lastErr error
	for {
		n, err := o.busy(ctx)
		if err == nil && n == 0 {
			return time.Since(start), true, nil
		}
		lastErr = err
		if time.Now().After(deadline) {
			return time.Since(start), false, lastErr
		}
		if err := ctxutil.Sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Since(start), false, err
		}
	}
}

// dbObserver reads the database through the store seam.
type dbObserver struct {
	st     store.Store
	sqlite string // the SQLite path for integrity_check, "" for PostgreSQL
}

func openDBObserver(ctx context.Context, dsn string) (*dbObserver, error) {
	kind, target, err := backend.Parse(dsn)
	if err != nil {
		return nil, err
	}
	st, err := backend.Open(ctx, dsn, store.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("opening the database read-only: %w", err)
	}
	o := &dbObserver{st: st}
	if kind == backend.SQLite {
		o.sqlite = target
	}
	return o, nil
}

func (o *dbObserver) busy(ctx context.Context) (int64, error) {
	s, err := o.st.Stats(ctx)
	if err != nil {
		return 0, err
	}
	return s.ByStatus[store.StatusPending] + s.ByStatus[store.StatusRunning], nil
}

func (o *dbObserver) observe(ctx context.Context, keys []KeyInfo) (Observed, error) {
	obs := Observed{Calls: map[string]ObservedCall{}, EffectsRead: true}
	for _, k := range keys {
		c, err := o.st.GetByKey(ctx, store.DefaultPrincipal, k.Key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return obs, fmt.Errorf("reading key %s: %w", k.Key, err)
		}
		oc := ObservedCall{CallID: c.CallID, Tool: c.Tool, Status: c.Status, Attempt: c.Attempt}
		if c.EffectID != nil {
			oc.EffectID = *c.EffectID
		}
		obs.Calls[k.Key] = oc
	}
	effects, err := o.st.ListEffects(ctx, 0)
	if err != nil {
		return obs, fmt.Errorf("reading effects: %w", err)
	}
	for _, e := range effects {
		obs.Effects = append(obs.Effects, ObservedEffect{EffectID: e.EffectID, CallID: e.CallID})
	}
	dupes, err := o.st.Dupes(ctx)
	if err != nil {
		return obs, fmt.Errorf("reading dupes: %w", err)
	}
	for _, d := range dupes {
		obs.Dupes = append(obs.Dupes, d.CallID)
	}
	if obs.Gates, err = o.st.GateStates(ctx); err != nil {
		return obs, fmt.Errorf("reading the gates: %w", err)
	}
	return obs, nil
}

// integrity runs PRAGMA integrity_check on the SQLite file, read-only,
// once the servers have stopped.
func (o *dbObserver) integrity(ctx context.Context) (string, bool, error) {
	if o.sqlite == "" {
		return "", false, nil
	}
	dsn := o.sqlite
	if !strings.HasPrefix(strings.ToLower(dsn), "file:") {
		dsn = "file:" + (&url.URL{Path: dsn}).EscapedPath()
	}
	if strings.Contains(dsn, "?") {
		dsn += "&mode=ro"
	} else {
		dsn += "?mode=ro"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return "", false, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return "", false, fmt.Errorf("integrity_check: %w", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return "", false, err
		}
		lines = append(lines, s)
	}
	if err := rows.Err(); err != nil {
		return "", false, err
	}
	return strings.Join(lines, "; "), true, nil
}

// running lists the calls running now, with their owners and attempts.
func (o *dbObserver) running(ctx context.Context) ([]HeldCall, error) {
	calls, err := o.st.ListCalls(ctx, store.ListFilter{Status: store.StatusRunning, Limit: 1000})
	if err != nil {
		return nil, err
	}
	out := make([]HeldCall, 0, len(calls))
	for _, c := range calls {
		if c.Owner != nil {
			out = append(out, HeldCall{CallID: c.CallID, Owner: *c.Owner, Attempt: c.Attempt})
		}
	}
	return out, nil
}

// audit reads the audit rows of the given calls.
func (o *dbObserver) audit(ctx context.Context, callIDs []string) (map[string][]AuditRow, error) {
	out := map[string][]AuditRow{}
	for _, id := range callIDs {
		if _, ok := out[id]; ok {
			continue
		}
		events, err := o.st.Audit(ctx, id, 0)
		if err != nil {
			return nil, fmt.Errorf("reading the audit of %s: %w", id, err)
		}
		rows := []AuditRow{}
		for _, e := range events {
			rows = append(rows, AuditRow{Event: e.Event, Detail: e.Detail})
		}
		out[id] = rows
	}
	return out, nil
}

func (o *dbObserver) close() { _ = o.st.Close() }

// apiObserver reads over the API of a deployment the soak does not run.
type apiObserver struct{ c *client.Client }

func (o *apiObserver) busy(ctx context.Context) (int64, error) {
	s, err := o.c.Stats(ctx)
	if err != nil {
		return 0, err
	}
	return s.ByStatus[wire.StatusPending] + s.ByStatus[wire.StatusRunning], nil
}

func (o *apiObserver) observe(ctx context.Context, keys []KeyInfo) (Observed, error) {
	obs := Observed{Calls: map[string]ObservedCall{}}
	for _, k := range keys {
		var c client.Call
		var err error
		for try := range sendAttempts { // a lookup may meet a 503 like any request
			if c, err = o.c.GetByKey(ctx, k.Key); err == nil || errors.Is(err, client.ErrNotFound) || ctx.Err() != nil {
				break
			}
			_ = ctxutil.Sleep(ctx, client.Backoff(try))
		}
		if errors.Is(err, client.ErrNotFound) {
			continue
		}
		if err != nil {
			return obs, fmt.Errorf("GET by-key %s: %w", k.Key, err)
		}
		oc := ObservedCall{CallID: c.CallID, Tool: c.Tool, Status: c.Status, Attempt: c.Attempt}
		if c.EffectID != nil {
			oc.EffectID = *c.EffectID
		}
		obs.Calls[k.Key] = oc
	}
	return obs, nil
}

func (o *apiObserver) close() {}
