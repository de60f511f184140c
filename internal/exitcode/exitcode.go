// Package exitcode names idemctl's process exit statuses in one place, so the
// commands, the server's chaos crash and the tools that watch a server
// process (fault, servertest) agree on what each number means. docs/cli.md,
// "Exit codes", lists them for users.
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
	// Error: the command line was fine but the command could not do its
	// work: the database cannot be opened or read, the port is taken, a
	// server did not answer as expected. Kept apart from Usage so that a
	// script can tell "fix the invocation" from "fix the environment, then
	// retry the same invocation".
	Error = 4
)
