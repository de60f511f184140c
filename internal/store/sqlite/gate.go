package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// gateColumns are scanGate's columns, in its order.
const gateColumns = `tool, tokens, refilled_at, breaker, failures, until`

func scanGate(sc scanner) (store.GateState, error) {
	var g store.GateState
	err := sc.Scan(&g.Tool, &g.Tokens, &g.RefilledAt, &g.Breaker, &g.Failures, &g.Until)
	return g, err
}

// sqlReady counts up to ? runnable pending calls of a tool (idx_calls_pending
// walked in order, filtered on the tool).
const sqlReady = `SELECT count(*) FROM (SELECT 1 FROM calls
	WHERE status = 'pending' AND tool = ? AND ` + notBeforePassed + ` LIMIT ?)`

const sqlPutGate = `INSERT INTO tool_gates (` + gateColumns + `) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT (tool) DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at,
	  breaker = excluded.breaker, failures = excluded.failures, until = excluded.until`

// gateTx runs fn on g's row (a new one if missing) at the transaction's
// now, and writes back the row fn returns. The group commit's one writer
// serializes it with every claim.
func (s *Store) gateTx(ctx context.Context, w store.Write, g store.Gate, fn func(ctx context.Context, tx *sql.Tx, now float64, st store.GateState) (store.GateState, error)) error {
	if s.readOnly {
		return fmt.Errorf("sqlite %s: %w", w, store.ErrReadOnly)
	}
	if err := store.CheckGate(g); err != nil {
		return fmt.Errorf("sqlite %s: %w", w, err)
	}
	if err := s.closedErr(w.String()); err != nil {
		return err
	}
	return s.writeTx(ctx, w, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		st, err := scanGate(tx.QueryRowContext(ctx, `SELECT `+gateColumns+` FROM tool_gates WHERE tool = ?`, g.Tool))
		if errors.Is(err, sql.ErrNoRows) {
			st, err = store.NewGateState(g, now), nil
		}
		if err != nil {
			return err
		}
		st, err = fn(ctx, tx, now, st)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlPutGate, g.Tool, st.Tokens, st.RefilledAt, st.Breaker, st.Failures, st.Until)
		return err
	})
}

// Admit takes up to want of g's tokens for the tool's ready calls. See
// store.GateStore.
func (s *Store) Admit(ctx context.Context, g store.Gate, want int) (store.Admission, error) {
	var a store.Admission
	if want <= 0 {
		return a, store.CheckGate(g)
	}
	err := s.gateTx(ctx, store.WriteAdmit, g, func(ctx context.Context, tx *sql.Tx, now float64, st store.GateState) (store.GateState, error) {
		var ready int
		if err := tx.QueryRowContext(ctx, sqlReady, g.Tool, now, want).Scan(&ready); err != nil {
			return st, err
		}
		st, a = st.Admit(g, now, want, ready)
		return st, nil
	})
	return a, err
}

// Unadmit gives back an admission's unused tokens and probe. See
// store.GateStore.
func (s *Store) Unadmit(ctx context.Context, g store.Gate, unused int, probe bool) error {
	return s.gateTx(ctx, store.WriteUnadmit, g, func(_ context.Context, _ *sql.Tx, now float64, st store.GateState) (store.GateState, error) {
		return st.Unadmit(g, now, unused, probe), nil
	})
}

// ReportAttempt counts an attempt's outcome in g's breaker. See
// store.GateStore.
func (s *Store) ReportAttempt(ctx context.Context, g store.Gate, o store.GateOutcome) (store.GateState, error) {
	var out store.GateState
	err := s.gateTx(ctx, store.WriteReport, g, func(_ context.Context, _ *sql.Tx, now float64, st store.GateState) (store.GateState, error) {
		out = st.Report(g, now, o)
		return out, nil
	})
	return out, err
}

// GateStates returns every gate row. See store.GateStore.
func (s *Store) GateStates(ctx context.Context) ([]store.GateState, error) {
	if err := s.closedErr("gate states"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+gateColumns+` FROM tool_gates ORDER BY tool`)
	if err != nil {
		return nil, interpret(ctx, "gate states", err)
	}
	defer rows.Close()
	out := []store.GateState{}
	for rows.Next() {
		g, err := scanGate(rows)
		if err != nil {
			return nil, interpret(ctx, "gate states", err)
		}
		out = append(out, g)
	}
	return out, interpret(ctx, "gate states", rows.Err())
}
