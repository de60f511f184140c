package webhook

import (
	"errors"
	"testing"
	"time"
)

func env(string) string { return "s3cret" }

// TestAllowMatch: a pattern allows its scheme, host (or, with "*.", the
// names below it, not itself), port (the scheme's default when none is
// written) and the paths at or below its path, segment-wise.
func TestAllowMatch(t *testing.T) {
	var eps []Endpoint
	for _, p := range []string{"https://*.hooks.example.com/in ${S}", "http://[::1]:9000/ ${S}", "https://exact.example.com ${S}"} {
		e, err := ParseEndpoint(p, env)
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, e)
	}
	a, err := NewAllow(eps, nil)
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]bool{
		"https://a.hooks.example.com/in":          true,
		"https://a.b.hooks.example.com/in/x?y=1":  true,
		"https://hooks.example.com/in":            false, // "*." is below, not the name itself
		"https://ahooks.example.com/in":           false,
		"https://a.hooks.example.com:443/in":      true,
		"https://a.hooks.example.com:444/in":      false,
		"https://a.hooks.example.com/inx":         false,
		"http://[::1]:9000/anything":              true,
		"http://[::1]/anything":                   false,
		"https://EXACT.example.com/":              true,
		"https://exact.example.com/any/path":      true,
		"https://exact.example.com/a/%2e%2e/b":    false, // an encoded dot segment
		"https://exact.example.com/a/./b":         false,
		"https://exact.example.com.attacker.net/": false,
	} {
		err := a.Check(u)
		if (err == nil) != want {
			t.Errorf("Check(%q) = %v, want allowed %v", u, err, want)
		}
		if err != nil && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("Check(%q) = %v, not ErrNotAllowed", u, err)
		}
	}
	if s, err := a.secret("https://exact.example.com/x"); err != nil || string(s) != "s3cret" {
		t.Errorf("secret = %q, %v", s, err)
	}
	var off *Allow
	if off.Enabled() || off.Check("https://exact.example.com/") == nil || off.Default("alice") != nil {
		t.Error("a nil Allow allows something")
	}
}

// TestAllowDefaults: a principal's own default, else "*"'s, else none.
func TestAllowDefaults(t *testing.T) {
	e, err := ParseEndpoint("https://hooks.example.com/ ${S}", env)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAllow([]Endpoint{e}, []string{"alice=https://hooks.example.com/alice", "*=https://hooks.example.com/all"})
	if err != nil {
		t.Fatal(err)
	}
	if d := a.Default("alice"); d == nil || *d != "https://hooks.example.com/alice" {
		t.Errorf("alice's default = %v", d)
	}
	if d := a.Default(""); d == nil || *d != "https://hooks.example.com/all" {
		t.Errorf("the default principal's default = %v", d)
	}
	if _, err := NewAllow([]Endpoint{e}, []string{"bob=https://hooks.example.com/1", "bob=https://hooks.example.com/2"}); err == nil {
		t.Error("two defaults of one principal accepted")
	}
	if b, _ := NewAllow([]Endpoint{e}, nil); b.Default("alice") != nil {
		t.Error("a default without --webhook-default")
	}
}

// TestBackoff doubles from the initial wait up to the cap.
func TestBackoff(t *testing.T) {
	for attempt, want := range map[int64]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 12: time.Hour, 1000: time.Hour} {
		if got := Backoff(5*time.Second, time.Hour, attempt); got != want {
			t.Errorf("Backoff(attempt %d) = %v, want %v", attempt, got, want)
		}
	}
}
