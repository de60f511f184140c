// Package exitcode names idemctl's process exit statuses in one place, so the
// commands, the server's chaos crash and the tools that watch a server
// process (fault, servertest) agree on what each number means.
package exitcode

const (
	// OK: the command did what was asked.
	OK = 0
	// Failed: the command ran and reports a negative outcome: a call ended
	// failed, inspect dupes found duplicates, a fault scenario or bench check
	// failed.
	Failed = 1
	// Usage: the command line or configuration is wrong (unknown flag, bad
	// value, conflicting flags). Nothing was attempted.
	Usage = 2
	// Crash: serve exited on purpose for a chaos hook (_crash_after_commit,
	// _crash_before_commit). A supervisor restarts it.
	Crash = 3
)
