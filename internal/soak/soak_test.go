package soak

import (
	"strings"
	"testing"
)

func TestWithAppName(t *testing.T) {
	got, app, err := withAppName("postgres://u:secret@h/db?sslmode=disable", "idemctl-soak-x", false)
	if err != nil || app != "idemctl-soak-x" || !strings.Contains(got, "application_name=idemctl-soak-x") || !strings.Contains(got, "sslmode=disable") {
		t.Fatalf("%q %q %v", got, app, err)
	}
	// A name the user set is kept, and is the one faults look for.
	got, app, _ = withAppName("postgres://h/db?application_name=mine", "idemctl-soak-x", false)
	if app != "mine" || got != "postgres://h/db?application_name=mine" {
		t.Fatalf("%q %q", got, app)
	}
	// The soak's own connections always get their own name.
	got, app, _ = withAppName("postgres://h/db?application_name=mine", "mine-reader", true)
	if app != "mine-reader" || !strings.Contains(got, "application_name=mine-reader") {
		t.Fatalf("%q %q", got, app)
	}
	got, app, _ = withAppName("host=h dbname=d application_name='x y'", "z", false)
	if app != "x y" || got != "host=h dbname=d application_name='x y'" {
		t.Fatalf("%q %q", got, app)
	}
	got, app, _ = withAppName("host=h dbname=d", "z", true)
	if app != "z" || got != "host=h dbname=d application_name=z" {
		t.Fatalf("%q %q", got, app)
	}
	if _, _, err := withAppName("postgres://u:secret@h:bad/db", "a", false); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("bad URL: %v", err)
	}
}

// TestWithHostPort: --pg-partition points each server at its proxy, in
// either DSN form, keeping everything else (a socket directory in the query
// would win over the URL's host, so it goes).
func TestWithHostPort(t *testing.T) {
	got, err := withHostPort("postgres://u:secret@db.internal:5433/idem?sslmode=disable&host=/run/pg", "127.0.0.1:4000")
	if err != nil || got != "postgres://u:secret@127.0.0.1:4000/idem?sslmode=disable" {
		t.Fatalf("%q %v", got, err)
	}
	got, _ = withHostPort("host=db port=5433 dbname=idem", "127.0.0.1:4000")
	if got != "host=db port=5433 dbname=idem host=127.0.0.1 port=4000" {
		t.Fatalf("%q", got)
	}
	if _, err := withHostPort("postgres://u:secret@h:bad/db", "127.0.0.1:1"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("bad URL: %v", err)
	}
}
