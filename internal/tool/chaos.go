package tool

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Chaos hook argument names (docs/tools.md, "Chaos hooks"), accepted only
// when the server runs with --chaos, on every tool whatever its kind.
const (
	ArgCrashAfterCommit  = "_crash_after_commit"
	ArgCrashBeforeCommit = "_crash_before_commit"
	// ArgPauseBeforeCommit takes seconds: the worker waits that long after
	// the tool ran and before its completion commits, as a worker frozen
	// past its lease would (docs/design.md, "The attempt as fencing token").
	ArgPauseBeforeCommit = "_pause_before_commit"
)

// maxPauseSeconds caps _pause_before_commit: long enough to outlast a
// short test lease, short enough that a forgotten pause stays harmless.
const maxPauseSeconds = 10

// IsChaosArg reports whether an argument name is reserved for the chaos
// hooks: every name starting with "_" (docs/tools.md, "Chaos hooks").
func IsChaosArg(name string) bool { return strings.HasPrefix(name, "_") }

// ValidateChaos checks only the reserved "_" arguments of a call to tool;
// other arguments are ignored. Names starting with "_" are refused unless
// chaos is true, and then only _crash_after_commit and _crash_before_commit
// with boolean values and _pause_before_commit with a number of seconds
// (0 < s ≤ maxPauseSeconds) are accepted. Every kind of tool runs it, so
// the hooks behave the same on every tool.
func ValidateChaos(tool string, args map[string]any, chaos bool) error {
	if !hasChaosArg(args) {
		return nil // nearly every call: nothing to sort
	}
	for _, name := range slices.Sorted(maps.Keys(args)) {
		if !IsChaosArg(name) {
			continue
		}
		if !chaos {
			return fmt.Errorf("%w: %s: argument %q: names starting with \"_\" are reserved for chaos hooks, which this server does not enable (--chaos)", ErrInvalidArgs, tool, name)
		}
		switch name {
		case ArgCrashAfterCommit, ArgCrashBeforeCommit:
			if _, ok := args[name].(bool); !ok {
				return fmt.Errorf("%w: %s: %s must be a boolean, got %s", ErrInvalidArgs, tool, name, Describe(args[name]))
			}
		case ArgPauseBeforeCommit:
			// 0 is refused rather than read as "no pause": a hook that
			// silently does nothing would make a scenario pass vacuously.
			if s, ok := Number(args[name]); !ok || s <= 0 || s > maxPauseSeconds {
				return fmt.Errorf("%w: %s: %s must be a number of seconds above 0 and at most %d, got %s", ErrInvalidArgs, tool, name, maxPauseSeconds, Describe(args[name]))
			}
		default:
			return fmt.Errorf("%w: %s: unknown chaos argument %q (allowed: %s, %s, %s)", ErrInvalidArgs, tool, name,
				ArgCrashAfterCommit, ArgCrashBeforeCommit, ArgPauseBeforeCommit)
		}
	}
	return nil
}

// hasChaosArg reports whether any argument name is a chaos hook's.
func hasChaosArg(args map[string]any) bool {
	for name := range args {
		if IsChaosArg(name) {
			return true
		}
	}
	return false
}

// Chaos is which chaos hooks a call asked for (docs/tools.md, "Chaos hooks"). The server acts
// on it only when it runs with --chaos (ValidateChaos refuses the arguments
// otherwise).
type Chaos struct {
	// CrashBeforeCommit: exit after the tool ran, before its transaction commits.
	CrashBeforeCommit bool
	// CrashAfterCommit: exit right after the success transaction commits.
	CrashAfterCommit bool
	// PauseBeforeCommit: wait this long after the tool ran, before its
	// transaction commits (0: no pause).
	PauseBeforeCommit time.Duration
}

// ChaosOf reads the chaos hook arguments; an absent or ill-typed crash
// argument means false, an absent or out-of-range pause means no pause.
func ChaosOf(args map[string]any) Chaos {
	before, _ := args[ArgCrashBeforeCommit].(bool)
	after, _ := args[ArgCrashAfterCommit].(bool)
	c := Chaos{CrashBeforeCommit: before, CrashAfterCommit: after}
	if s, ok := Number(args[ArgPauseBeforeCommit]); ok && s > 0 && s <= maxPauseSeconds {
		c.PauseBeforeCommit = time.Duration(s * float64(time.Second))
	}
	return c
}
