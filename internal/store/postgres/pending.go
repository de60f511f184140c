package postgres

import (
	"context"
)

// PendingByPrincipal counts pending calls per principal (store.Store).
func (s *Store) PendingByPrincipal(ctx context.Context, atLeast int64) (map[string]int64, error) {
	ctx, cancel := s.step(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `
SELECT principal, count(*) FROM calls WHERE status = 'pending'
GROUP BY principal HAVING count(*) >= $1`, max(atLeast, 1))
	if err != nil {
		return nil, interpret(ctx, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			p string
			n int64
		)
		if err := rows.Scan(&p, &n); err != nil {
			return nil, interpret(ctx, err)
		}
		out[p] = n
	}
	if err := rows.Err(); err != nil {
		return nil, interpret(ctx, err)
	}
	return out, nil
}
