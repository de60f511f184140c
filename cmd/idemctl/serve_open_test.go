package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// opener fails with errs in turn, then opens a real SQLite store; it
// counts its calls.
type opener struct {
	t     *testing.T
	errs  []error
	calls int
}

func (o *opener) open(ctx context.Context) (store.Store, error) {
	o.calls++
	if o.calls <= len(o.errs) {
		return nil, o.errs[o.calls-1]
	}
	st, err := sqlite.Open(ctx, o.t.TempDir()+"/db.sqlite", store.Options{})
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { st.Close() })
	return st, nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func unavailable(n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = fmt.Errorf("postgres: migrate schema: %w: terminating connection", store.ErrUnavailable)
	}
	return errs
}

func TestOpenWithWaitRetriesUnavailable(t *testing.T) {
	t.Parallel()
	o := &opener{t: t, errs: unavailable(3)}
	st, err := openWithWait(context.Background(), o.open, time.Minute, time.Millisecond, quiet, "postgres://u:secret@h/db")
	if err != nil || st == nil {
		t.Fatalf("open after 3 unavailable answers: %v", err)
	}
	if o.calls != 4 {
		t.Fatalf("opened after %d attempts, want 4", o.calls)
	}
}

func TestOpenWithWaitFailsAtOnceOnOtherErrors(t *testing.T) {
	t.Parallel()
	bad := errors.New("password authentication failed")
	o := &opener{t: t, errs: []error{bad}}
	_, err := openWithWait(context.Background(), o.open, time.Minute, time.Millisecond, quiet, "x")
	if !errors.Is(err, bad) || o.calls != 1 {
		t.Fatalf("err %v after %d attempts, want the error after 1", err, o.calls)
	}
}

func TestOpenWithWaitGivesUpAfterWait(t *testing.T) {
	t.Parallel()
	o := &opener{t: t, errs: unavailable(1 << 20)}
	_, err := openWithWait(context.Background(), o.open, 50*time.Millisecond, 5*time.Millisecond, quiet, "x")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("err %v, want the last unavailable error", err)
	}
	if o.calls < 2 || o.calls > 1000 {
		t.Fatalf("%d attempts within the wait, want a few", o.calls)
	}
	// wait 0: one attempt.
	o = &opener{t: t, errs: unavailable(1)}
	if _, err := openWithWait(context.Background(), o.open, 0, time.Millisecond, quiet, "x"); err == nil || o.calls != 1 {
		t.Fatalf("--db-wait 0: err %v after %d attempts, want the error after 1", err, o.calls)
	}
}
