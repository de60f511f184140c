package tool

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/fingerprint"
)

// args parses a JSON object and normalizes it, as the server does before it
// validates and stores the arguments.
func args(t *testing.T, s string) map[string]any {
	t.Helper()
	v, err := fingerprint.ParseJSON([]byte(s))
	if err != nil {
		t.Fatalf("parse %s: %v", s, err)
	}
	n, err := fingerprint.Normalize(v)
	if err != nil {
		t.Fatalf("normalize %s: %v", s, err)
	}
	return n.(map[string]any)
}

func TestChaosOf(t *testing.T) {
	cases := []struct {
		args string
		want Chaos
	}{
		{`{}`, Chaos{}},
		{`{"_crash_after_commit":true}`, Chaos{CrashAfterCommit: true}},
		{`{"_crash_before_commit":true}`, Chaos{CrashBeforeCommit: true}},
		{`{"_crash_before_commit":true,"_crash_after_commit":false}`, Chaos{CrashBeforeCommit: true}},
		{`{"_crash_after_commit":"true"}`, Chaos{}},
		{`{"_pause_before_commit":1}`, Chaos{PauseBeforeCommit: time.Second}},
		{`{"_pause_before_commit":2.5,"_crash_before_commit":true}`, Chaos{PauseBeforeCommit: 2500 * time.Millisecond, CrashBeforeCommit: true}},
		{`{"_pause_before_commit":1e-3}`, Chaos{PauseBeforeCommit: time.Millisecond}},
		// Values Validate refuses mean no pause, never a negative or huge one.
		{`{"_pause_before_commit":0}`, Chaos{}},
		{`{"_pause_before_commit":-1}`, Chaos{}},
		{`{"_pause_before_commit":11}`, Chaos{}},
		{`{"_pause_before_commit":"1"}`, Chaos{}},
	}
	for _, c := range cases {
		if got := ChaosOf(args(t, c.args)); got != c.want {
			t.Errorf("ChaosOf(%s) = %+v, want %+v", c.args, got, c.want)
		}
	}
	if got := ChaosOf(nil); got != (Chaos{}) {
		t.Errorf("ChaosOf(nil) = %+v", got)
	}
}

func TestEffectID(t *testing.T) {
	re := regexp.MustCompile(`^eff_[0-9a-f]{16}$`)
	a1, a2 := EffectID("c_0123456789abcdef"), EffectID("c_0123456789abcdef")
	b := EffectID("c_0123456789abcdee")
	if a1 != a2 {
		t.Errorf("EffectID not deterministic: %s vs %s", a1, a2)
	}
	if a1 == b {
		t.Errorf("different calls share effect id %s", a1)
	}
	for _, id := range []string{a1, b} {
		if !re.MatchString(id) {
			t.Errorf("EffectID = %q, want eff_ + 16 lowercase hex", id)
		}
	}
	// Pinned: changing the derivation would give in-flight calls a new
	// downstream key between attempts. Computed outside Go with
	//   printf '%s' 'idemctl-effect:c_0123456789abcdef' | sha256sum | cut -c1-16
	if want := "eff_" + "69255e5dfcd9060f"; a1 != want {
		t.Errorf("EffectID(c_0123456789abcdef) = %s, want %s", a1, want)
	}
}

func TestToolErrorJSON(t *testing.T) {
	b, err := json.Marshal(ToolError{Code: "tool_failed", Message: "m", Retryable: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"code":"tool_failed","message":"m","retryable":true}`; string(b) != want {
		t.Errorf("ToolError JSON = %s, want %s", b, want)
	}
}
