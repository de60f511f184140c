package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// TestPGDuration reads PostgreSQL time settings as the server does: the
// client-side deadlines are derived from the lock and statement timeouts
// wherever they were set (the URL spells them in the server's syntax).
func TestPGDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"5000":   5 * time.Second, // a bare number is milliseconds
		"5000ms": 5 * time.Second,
		"7s":     7 * time.Second,
		" 2 s ":  2 * time.Second,
		"1.5s":   1500 * time.Millisecond,
		"1min":   time.Minute,
		"2h":     2 * time.Hour,
		"1d":     24 * time.Hour,
		"250us":  250 * time.Microsecond,
		"0":      0,
	} {
		got, ok := pgDuration(in)
		if !ok || got != want {
			t.Errorf("pgDuration(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "s", "5 parsecs", "-1s", "1e3"} {
		if got, ok := pgDuration(in); ok {
			t.Errorf("pgDuration(%q) = %v; want not ok", in, got)
		}
	}
}

// TestNoAnswerIsUnavailable: the cause of the store's own deadline is
// ErrUnavailable (503, retry with the same key), never the caller's
// cancellation nor an internal error.
func TestNoAnswerIsUnavailable(t *testing.T) {
	if err := error(errNoAnswer{6 * time.Second}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%v is not ErrUnavailable", err)
	}
}
