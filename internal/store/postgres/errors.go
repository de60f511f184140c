package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/idemctl/idemctl/internal/store"
)

// interpret translates pgx and PostgreSQL errors into the store's sentinels,
// wrapping the original so its text is kept. Already-translated errors and
// nil pass through. If ctx is done, the caller's context is the cause,
// whatever the driver made of it (a connection cut mid-query looks like a
// network error), so the context's error is reported.
func interpret(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if store.IsSentinel(err) {
		return err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if cause := context.Cause(ctx); errors.As(cause, new(errNoAnswer)) {
			// This package's own deadline (Store.step), not the caller's:
			// the database did not answer.
			return fmt.Errorf("%w (%v)", cause, err)
		}
		if errors.Is(err, ctxErr) {
			return err
		}
		return fmt.Errorf("%w (%v)", ctxErr, err)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "25006": // read_only_sql_transaction
			return fmt.Errorf("%w: %w", store.ErrReadOnly, err)
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			strings.HasPrefix(pgErr.Code, "53"),  // insufficient resources: disk full, out of memory, too many connections
			strings.HasPrefix(pgErr.Code, "57P"), // admin/crash shutdown, cannot connect now
			pgErr.Code == "55P03",                // lock_not_available: waited past lock_timeout
			pgErr.Code == "57014",                // query_canceled: ran past statement_timeout
			pgErr.Code == "25P03",                // idle_in_transaction_session_timeout: the session was ended
			// Cannot happen with the statements of this package (see the
			// package comment), but if a server-side setting ever produces
			// them they are transient: a same-key retry is safe.
			pgErr.Code == "40001", pgErr.Code == "40P01":
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		case strings.HasPrefix(pgErr.Code, "22"), // data exception: a value it cannot store
			strings.HasPrefix(pgErr.Code, "23"), // integrity constraint violation
			strings.HasPrefix(pgErr.Code, "54"): // program limit exceeded: a value or row too big
			// The same write is refused every time: a refusal for good,
			// named by its SQLSTATE (a class code, never the value).
			return &store.RefusedError{Code: "SQLSTATE " + pgErr.Code, Err: err}
		}
		return err
	}
	// Failures below the SQL layer: could not connect (connect_timeout
	// included, which pgx reports as a context deadline of its own, not
	// the caller's), connection lost mid-statement, pool closed.
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, puddle.ErrClosedPool) ||
		pgconn.SafeToRetry(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// batchWide reports whether a failed statement of a group-commit batch
// failed for a reason that is not about the rows of the write that sent
// it: the database is out of time (lock_timeout 55P03, statement_timeout
// 57014), out of resources (class 53), shutting down (57P), lost (class
// 08), or a deadlock (40P01) between the batch and another transaction.
// Every write of the batch gets that answer at once: run again alone, each
// would meet the same wall and wait the timeout again, in turn, so the last
// one of a batch of 64 would be answered after 64 timeouts instead of one.
// Any other error (a constraint, a value the column refuses) belongs to
// one write, and the others run again without it (group.commit).
func batchWide(pgErr *pgconn.PgError) bool {
	switch {
	case pgErr.Code == "55P03", pgErr.Code == "57014", pgErr.Code == "40P01",
		strings.HasPrefix(pgErr.Code, "53"),
		strings.HasPrefix(pgErr.Code, "57P"),
		strings.HasPrefix(pgErr.Code, "08"):
		return true
	}
	return false
}
