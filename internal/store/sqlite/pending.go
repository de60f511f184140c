package sqlite

import (
	"context"
)

// sqlPendingByPrincipal counts pending calls per principal: the partial
// index idx_calls_pending finds them, the table gives each one's
// principal. INDEXED BY: unforced, the planner scans the whole key index
// (principal, idem_key) for the GROUP BY (TestListByStatusPlans).
const sqlPendingByPrincipal = `
SELECT principal, count(*) FROM calls INDEXED BY idx_calls_pending WHERE status = 'pending'
GROUP BY principal HAVING count(*) >= ?`

// PendingByPrincipal counts pending calls per principal (store.Store;
// sqlPendingByPrincipal).
func (s *Store) PendingByPrincipal(ctx context.Context, atLeast int64) (map[string]int64, error) {
	if err := s.closedErr("pending by principal"); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, sqlPendingByPrincipal, max(atLeast, 1))
	if err != nil {
		return nil, interpret(ctx, "pending by principal", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			p string
			n int64
		)
		if err := rows.Scan(&p, &n); err != nil {
			return nil, interpret(ctx, "pending by principal", err)
		}
		out[p] = n
	}
	if err := rows.Err(); err != nil {
		return nil, interpret(ctx, "pending by principal", err)
	}
	return out, nil
}
