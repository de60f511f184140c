package main

import (
	"runtime/debug"
	"testing"
)

// gcPercent reads the runtime's GOGC (SetGCPercent returns the old value).
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestServeGC: serve raises the GC target to serveGCPercent when GOGC is
// not set, and leaves the runtime's setting alone when it is, even to the
// default.
func TestServeGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if p, set := setServeGC(getenv); !set || p != serveGCPercent || gcPercent() != serveGCPercent {
		t.Fatalf("GOGC unset: setServeGC = %d, %v; runtime GOGC = %d; want %d", p, set, gcPercent(), serveGCPercent)
	}

	debug.SetGCPercent(100)
	env["GOGC"] = "100"
	if p, set := setServeGC(getenv); set || p != 0 || gcPercent() != 100 {
		t.Fatalf("GOGC=100: setServeGC = %d, %v; runtime GOGC = %d; want it left at 100", p, set, gcPercent())
	}
}
