package bench

import "fmt"

// Check is one invariant the bench verified, with what it saw.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// checkInput is what the invariants are computed from.
type checkInput struct {
	sameKey      bool
	effectTool   bool
	requests     int    // requests sent
	answered2xx  int    // responses 2xx (a same-key run repeats one key)
	unexpected   int    // responses neither 2xx nor 429/503
	statuses     string // the status counts, for the details
	keysSent     int    // distinct keys sent
	acked        int    // distinct keys answered 2xx
	clean        bool   // every request got a response and none was a 5xx
	drainChecked bool   // a drain was attempted (DrainTimeout > 0)
	drained      bool   // no call pending or running at the end
	calls        int64  // calls delta from /stats
	effects      int64  // effects delta from /stats
}

// checks evaluates the invariants the bench can see from outside
// (docs/lifecycle.md, "Invariants"). They assume the bench is the only client of the service while
// it runs: another client's calls would move the same /stats counters.
func checks(in checkInput) []Check {
	var out []Check
	add := func(name string, ok bool, format string, args ...any) {
		out = append(out, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}

	// A load test measures the service doing its job. If nothing was
	// acknowledged, every other check holds vacuously (0 ≤ 0) and the
	// numbers measure refusals or timeouts: the run must not pass (e.g.
	// --request-timeout 1ms, every request status0).
	add("acknowledged", in.answered2xx > 0,
		"%d of %d requests answered 2xx (%s)", in.answered2xx, in.requests, in.statuses)
	// Any answer other than 2xx and the documented back-pressure (429,
	// 503: "retry later", expected under overload) means the requests were
	// wrong (400: bad --args or tool, 404: wrong --base, 409: a key reused)
	// or the service broke (500). Either way the run did not measure what
	// it was meant to, even if some requests got through: like a load
	// tool's error-rate threshold of zero, it fails. Requests that got no
	// answer (status0) are not counted here: a dropped reply is a network
	// condition the invariant checks are built to tolerate (see
	// calls_within_bounds).
	add("no_unexpected_status", in.unexpected == 0,
		"%d of %d requests answered with a status other than 2xx, 429 or 503 (%s)", in.unexpected, in.requests, in.statuses)

	// Never more side effects than logical calls: more means duplicates.
	add("effects_le_calls", in.effects <= in.calls,
		"effects delta %d ≤ calls delta %d", in.effects, in.calls)

	if in.drainChecked {
		add("drained", in.drained,
			"every accepted call reached a final state (no pending or running left)")
	}

	if in.sameKey {
		// One key is one logical call, whatever the concurrency (docs/design.md,
		// "Why the key is unique").
		if in.acked > 0 {
			add("same_key_one_call", in.calls == 1, "calls delta %d == 1", in.calls)
		} else {
			add("same_key_one_call", in.calls <= 1, "calls delta %d ≤ 1 (no request was acknowledged)", in.calls)
		}
		// At most one effect per call (docs/design.md, "Why effects are unique
		// per call"), and exactly the call's one once it ran.
		add("same_key_at_most_one_effect", in.effects <= 1, "effects delta %d ≤ 1", in.effects)
		if in.effectTool && in.drained && in.acked > 0 {
			add("same_key_one_effect", in.effects == 1, "effects delta %d == 1 once drained", in.effects)
		}
		if !in.effectTool {
			add("no_effect_tool", in.effects == 0, "effects delta %d == 0 for a tool without effects", in.effects)
		}
		return out
	}

	// Distinct keys: each acknowledged key is one call. A key that got no
	// reply (timeout, reset) may or may not have been recorded, so without a
	// clean run only bounds can be checked.
	if in.clean {
		add("calls_eq_acked", in.calls == int64(in.acked),
			"calls delta %d == %d 2xx-acknowledged keys", in.calls, in.acked)
	} else {
		add("calls_within_bounds", int64(in.acked) <= in.calls && in.calls <= int64(in.keysSent),
			"%d acknowledged ≤ calls delta %d ≤ %d keys sent (some requests got no reply or a 5xx)", in.acked, in.calls, in.keysSent)
	}
	switch {
	case !in.effectTool:
		add("no_effect_tool", in.effects == 0, "effects delta %d == 0 for a tool without effects", in.effects)
	case !in.drained:
		// Calls may still be running: only the upper bound holds.
		add("effects_le_keys", in.effects <= int64(in.keysSent),
			"effects delta %d ≤ %d keys sent (not drained: equality not checked)", in.effects, in.keysSent)
	case in.clean:
		add("effects_eq_acked", in.effects == int64(in.acked),
			"effects delta %d == %d 2xx-acknowledged keys once drained", in.effects, in.acked)
	default:
		add("effects_within_bounds", int64(in.acked) <= in.effects && in.effects <= int64(in.keysSent),
			"%d acknowledged ≤ effects delta %d ≤ %d keys sent once drained", in.acked, in.effects, in.keysSent)
	}
	return out
}

// allOK reports whether every check passed.
func allOK(cs []Check) bool {
	for _, c := range cs {
		if !c.OK {
			return false
		}
	}
	return true
}
