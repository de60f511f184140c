package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/internal/store"
)

// gateColumns are scanGate's columns, in its order.
const gateColumns = `tool, tokens, refilled_at, breaker, failures, until`

func scanGate(sc pgx.Row) (store.GateState, error) {
	var g store.GateState
	err := sc.Scan(&g.Tool, &g.Tokens, &g.RefilledAt, &g.Breaker, &g.Failures, &g.Until)
	return g, err
}

// readySQL reads the database's now ($2 is not used before it) and counts
// up to $2 runnable pending calls of tool $1, walking idx_calls_pending.
// It runs after the gate row is locked, so its now is the lock holder's.
const readySQL = `
WITH clock AS MATERIALIZED (SELECT ` + dbNow + ` AS now)
SELECT clock.now, (SELECT count(*) FROM (
  SELECT 1 FROM calls c
  WHERE c.status = 'pending' AND c.tool = $1 AND (c.not_before IS NULL OR c.not_before <= clock.now)
  LIMIT $2) AS r)
FROM clock`

// gateTx runs fn on g's row, locked FOR UPDATE (inserted first if
// missing, NewGateState), and writes back the row fn returns, in one
// transaction: instances admitting the same tool take turns on its row.
// fn gets the transaction to read the database's now after the lock.
func (s *Store) gateTx(ctx context.Context, w store.Write, g store.Gate, fn func(tx pgx.Tx, st store.GateState) (store.GateState, error)) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := store.CheckGate(g); err != nil {
		return fmt.Errorf("postgres %s: %w", w, err)
	}
	ctx, cancel := s.step(ctx)
	defer cancel()
	err := s.inTx(ctx, s.beforeCommit(w, nil, func(tx pgx.Tx) error {
		fresh := store.NewGateState(g, 0)
		if _, err := tx.Exec(ctx, `INSERT INTO tool_gates (`+gateColumns+`)
			VALUES ($1, $2, `+dbNow+`, $3, 0, 0) ON CONFLICT (tool) DO NOTHING`,
			g.Tool, fresh.Tokens, fresh.Breaker); err != nil {
			return err
		}
		st, err := scanGate(tx.QueryRow(ctx, `SELECT `+gateColumns+` FROM tool_gates WHERE tool = $1 FOR UPDATE`, g.Tool))
		if err != nil {
			return err
		}
		st, err = fn(tx, st)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE tool_gates SET tokens = $2, refilled_at = $3, breaker = $4, failures = $5, until = $6
			WHERE tool = $1`, g.Tool, st.Tokens, st.RefilledAt, st.Breaker, st.Failures, st.Until)
		return err
	}))
	return interpret(ctx, err)
}

// now reads the database's clock inside tx.
func now(ctx context.Context, tx pgx.Tx) (float64, error) {
	var t float64
	err := tx.QueryRow(ctx, `SELECT `+dbNow).Scan(&t)
	return t, err
}

// Admit takes up to want of g's tokens for the tool's ready calls. See
// store.GateStore.
func (s *Store) Admit(ctx context.Context, g store.Gate, want int) (store.Admission, error) {
	var a store.Admission
	if want <= 0 {
		return a, store.CheckGate(g)
	}
	err := s.gateTx(ctx, store.WriteAdmit, g, func(tx pgx.Tx, st store.GateState) (store.GateState, error) {
		var (
			t     float64
			ready int
		)
		if err := tx.QueryRow(ctx, readySQL, g.Tool, want).Scan(&t, &ready); err != nil {
			return st, err
		}
		st, a = st.Admit(g, t, want, ready)
		return st, nil
	})
	return a, err
}

// Unadmit gives back an admission's unused tokens and probe. See
// store.GateStore.
func (s *Store) Unadmit(ctx context.Context, g store.Gate, unused int, probe bool) error {
	return s.gateTx(ctx, store.WriteUnadmit, g, func(tx pgx.Tx, st store.GateState) (store.GateState, error) {
		t, err := now(ctx, tx)
		if err != nil {
			return st, err
		}
		return st.Unadmit(g, t, unused, probe), nil
	})
}

// ReportAttempt counts an attempt's outcome in g's breaker. See
// store.GateStore.
func (s *Store) ReportAttempt(ctx context.Context, g store.Gate, o store.GateOutcome) (store.GateState, error) {
	var out store.GateState
	err := s.gateTx(ctx, store.WriteReport, g, func(tx pgx.Tx, st store.GateState) (store.GateState, error) {
		t, err := now(ctx, tx)
		if err != nil {
			return st, err
		}
		out = st.Report(g, t, o)
		return out, nil
	})
	return out, err
}

// GateStates returns every gate row. See store.GateStore.
func (s *Store) GateStates(ctx context.Context) ([]store.GateState, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT `+gateColumns+` FROM tool_gates ORDER BY tool`)
	if err != nil {
		return nil, interpret(ctx, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.GateState, error) { return scanGate(r) })
	if err != nil {
		return nil, interpret(ctx, err)
	}
	if out == nil {
		out = []store.GateState{}
	}
	return out, nil
}
