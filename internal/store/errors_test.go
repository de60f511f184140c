package store

import (
	"errors"
	"fmt"
	"testing"
)

// TestRefusedError: a wrapped *RefusedError is ErrRefused, is a sentinel,
// keeps the driver's error in its chain, and no other sentinel matches it.
func TestRefusedError(t *testing.T) {
	driver := errors.New("UNIQUE constraint failed: effects.effect_id")
	err := fmt.Errorf("sqlite succeed: %w", &RefusedError{Code: "SQLITE_CONSTRAINT 2067", Err: driver})
	if !errors.Is(err, ErrRefused) || !IsSentinel(err) || !errors.Is(err, driver) {
		t.Fatalf("%v: want ErrRefused, a sentinel, wrapping the driver's error", err)
	}
	for _, other := range []error{ErrNotFound, ErrConflict, ErrNotHeld, ErrFenced, ErrUnavailable, ErrReadOnly} {
		if errors.Is(err, other) {
			t.Fatalf("%v matches %v", err, other)
		}
	}
	if IsSentinel(driver) || IsSentinel(nil) {
		t.Fatal("IsSentinel is true for a plain error or nil")
	}
}

// TestCheckEffect: an effect needs an id and may only name its own call.
func TestCheckEffect(t *testing.T) {
	for _, tc := range []struct {
		name string
		eff  *Effect
		ok   bool
	}{
		{"no effect", nil, true},
		{"own call", &Effect{EffectID: "eff_1", CallID: "c_1"}, true},
		{"call left blank", &Effect{EffectID: "eff_1"}, true},
		{"no id", &Effect{CallID: "c_1"}, false},
		{"another call", &Effect{EffectID: "eff_1", CallID: "c_2"}, false},
	} {
		err := CheckEffect(Completion{Lease: Lease{CallID: "c_1"}, Effect: tc.eff})
		if (err == nil) != tc.ok {
			t.Errorf("%s: CheckEffect = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestRetryable: only a JSON true makes a failure retryable.
func TestRetryable(t *testing.T) {
	for in, want := range map[string]bool{
		`{"retryable":true}`:   true,
		`{"retryable":false}`:  false,
		`{"retryable":"true"}`: false,
		`{}`:                   false,
		`not json`:             false,
	} {
		if got := Retryable([]byte(in)); got != want {
			t.Errorf("Retryable(%s) = %v, want %v", in, got, want)
		}
	}
}
