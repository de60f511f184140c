package client

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"k", true},
		{"..", true},
		{"a/b?c#d%2F", true},
		{"!~", true}, // the ends of the visible range
		{strings.Repeat("k", MaxKeyLength), true},
		{"", false},
		{strings.Repeat("k", MaxKeyLength+1), false},
		{"a b", false},
		{"tab\t", false},
		{"\x7f", false},
		{"é", false},
	} {
		err := CheckKey(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("CheckKey(%q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("CheckKey(%q) = %v, want code invalid_key", tc.key, err)
		}
	}
}

// TestWaitByKeyRefusesAnImpossibleKey: a key the server can never accept
// was never recorded; WaitByKey says so at once instead of polling until
// the deadline, and sends nothing.
func TestWaitByKeyRefusesAnImpossibleKey(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t, respond(404, errJSON("not_found")))
	c, rec := setup(t, fs.srv.URL, WithWaitTimeout(200*time.Millisecond))
	_, err := c.WaitByKey(t.Context(), "has space")
	if !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("err = %v, want invalid_key", err)
	}
	if n := fs.requests(); n != 0 || len(rec.got()) != 0 {
		t.Fatalf("requests = %d, sleeps = %v; want none", n, rec.got())
	}
}
