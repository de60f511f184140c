package main

import (
	"runtime/debug"
)

// serveGCPercent is serve's garbage-collection target when the
// environment sets no GOGC. A server's live heap is small (the calls in
// flight, a few caches) while every request allocates; at Go's default of
// 100 the collector runs each time the heap doubles, and its CPU competes
// with SQLite's one writer goroutine, which bounds a server's rate on
// SQLite. At 400 that rate rose about 5 % for about 10 MB more RSS
// (BENCHMARKS.md §22). GOGC in the environment, GOGC=100 included, wins,
// and GOMEMLIMIT still bounds the heap.
const serveGCPercent = 400

// setServeGC applies serveGCPercent unless getenv("GOGC") is set, and
// reports the percent it set (0, false when it left the runtime alone).
func setServeGC(getenv func(string) string) (percent int, set bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	debug.SetGCPercent(serveGCPercent)
	return serveGCPercent, true
}
