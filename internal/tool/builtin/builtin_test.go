package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/tool"
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

func TestNamesAndKnown(t *testing.T) {
	want := []string{"charge", "fail", "send_email", "sleep"}
	got := Names()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	got[0] = "mutated"
	if Names()[0] != "charge" {
		t.Error("Names returns the package's own slice")
	}
	for _, n := range want {
		if !Known(n) {
			t.Errorf("Known(%q) = false", n)
		}
	}
	for _, n := range []string{"", "Charge", "refund", "charge "} {
		if Known(n) {
			t.Errorf("Known(%q) = true", n)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		tool    string
		args    string
		chaos   bool
		want    error  // nil: valid
		message string // substring of the error
	}{
		// charge
		{"charge", `{"amount":100}`, false, nil, ""},
		{"charge", `{"amount":1}`, false, nil, ""},
		{"charge", `{"amount":1.0}`, false, nil, ""},
		{"charge", `{"amount":1e2}`, false, nil, ""},
		{"charge", `{"amount":1000000000000}`, false, nil, ""},
		{"charge", `{"amount":100,"note":null}`, false, nil, ""}, // null members are dropped by Normalize
		{"charge", `{}`, false, tool.ErrInvalidArgs, "amount is required"},
		{"charge", `{"amount":null}`, false, tool.ErrInvalidArgs, "amount is required"},
		{"charge", `{"amount":0}`, false, tool.ErrInvalidArgs, "amount must be an integer"},
		{"charge", `{"amount":-5}`, false, tool.ErrInvalidArgs, "amount"},
		{"charge", `{"amount":1.5}`, false, tool.ErrInvalidArgs, "got 1.5"},
		{"charge", `{"amount":"100"}`, false, tool.ErrInvalidArgs, `got string "100"`},
		{"charge", `{"amount":true}`, false, tool.ErrInvalidArgs, "amount"},
		{"charge", `{"amount":[100]}`, false, tool.ErrInvalidArgs, "amount"},
		{"charge", `{"amount":1000000000001}`, false, tool.ErrInvalidArgs, "amount"},
		{"charge", `{"amount":100,"currency":"EUR"}`, false, tool.ErrInvalidArgs, `unknown argument "currency"`},
		// send_email
		{"send_email", `{"to":"a@example.com"}`, false, nil, ""},
		{"send_email", `{"to":"a@example.com","subject":"hi","body":""}`, false, nil, ""},
		{"send_email", `{}`, false, tool.ErrInvalidArgs, "to must be a non-empty string"},
		{"send_email", `{"to":""}`, false, tool.ErrInvalidArgs, "to"},
		{"send_email", `{"to":"  "}`, false, tool.ErrInvalidArgs, "to"},
		{"send_email", `{"to":42}`, false, tool.ErrInvalidArgs, "to"},
		{"send_email", `{"to":"a@b","subject":1}`, false, tool.ErrInvalidArgs, "subject must be a string"},
		{"send_email", `{"to":"a@b","body":false}`, false, tool.ErrInvalidArgs, "body must be a string"},
		{"send_email", `{"to":"a@b","cc":"c@d"}`, false, tool.ErrInvalidArgs, `unknown argument "cc"`},
		// sleep
		{"sleep", `{"seconds":0}`, false, nil, ""},
		{"sleep", `{"seconds":0.25}`, false, nil, ""},
		{"sleep", `{"seconds":10}`, false, nil, ""},
		{"sleep", `{}`, false, tool.ErrInvalidArgs, "seconds is required"},
		{"sleep", `{"seconds":10.5}`, false, tool.ErrInvalidArgs, "seconds must be a number from 0 to 10"},
		{"sleep", `{"seconds":-1}`, false, tool.ErrInvalidArgs, "seconds"},
		{"sleep", `{"seconds":"1"}`, false, tool.ErrInvalidArgs, "seconds"},
		// fail
		{"fail", `{}`, false, nil, ""},
		{"fail", `{"retryable":false,"times":2,"message":"boom"}`, false, nil, ""},
		{"fail", `{"times":0}`, false, nil, ""},
		{"fail", `{"times":2.0}`, false, nil, ""},
		{"fail", `{"retryable":"yes"}`, false, tool.ErrInvalidArgs, "retryable must be a boolean"},
		{"fail", `{"times":-1}`, false, tool.ErrInvalidArgs, "times must be an integer >= 0"},
		{"fail", `{"times":1.5}`, false, tool.ErrInvalidArgs, "times"},
		{"fail", `{"message":7}`, false, tool.ErrInvalidArgs, "message must be a string"},
		{"fail", `{"count":1}`, false, tool.ErrInvalidArgs, `unknown argument "count"`},
		// unknown tool
		{"refund", `{}`, false, tool.ErrUnknownTool, `"refund"`},
		{"", `{}`, false, tool.ErrUnknownTool, ""},
		// underscore keys and chaos
		{"charge", `{"amount":1,"_crash_after_commit":true}`, false, tool.ErrInvalidArgs, `"_crash_after_commit"`},
		{"charge", `{"amount":1,"_anything":1}`, false, tool.ErrInvalidArgs, "reserved for chaos hooks"},
		{"charge", `{"amount":1,"_crash_after_commit":true}`, true, nil, ""},
		{"charge", `{"amount":1,"_crash_before_commit":true}`, true, nil, ""},
		{"send_email", `{"to":"a@b","_crash_before_commit":false,"_crash_after_commit":false}`, true, nil, ""},
		{"charge", `{"amount":1,"_crash_after_commit":"true"}`, true, tool.ErrInvalidArgs, "_crash_after_commit must be a boolean"},
		{"charge", `{"amount":1,"_crash_later":true}`, true, tool.ErrInvalidArgs, `unknown chaos argument "_crash_later"`},
		{"charge", `{"_crash_after_commit":true}`, true, tool.ErrInvalidArgs, "amount is required"},
		// _pause_before_commit: seconds, 0 < s <= 10, chaos only
		{"charge", `{"amount":1,"_pause_before_commit":1}`, false, tool.ErrInvalidArgs, "reserved for chaos hooks"},
		{"charge", `{"amount":1,"_pause_before_commit":1}`, true, nil, ""},
		{"charge", `{"amount":1,"_pause_before_commit":2.5}`, true, nil, ""},
		{"charge", `{"amount":1,"_pause_before_commit":0.001}`, true, nil, ""},
		{"charge", `{"amount":1,"_pause_before_commit":10}`, true, nil, ""},
		{"sleep", `{"seconds":0,"_pause_before_commit":1,"_crash_after_commit":false}`, true, nil, ""},
		{"charge", `{"amount":1,"_pause_before_commit":0}`, true, tool.ErrInvalidArgs, "_pause_before_commit must be a number of seconds above 0 and at most 10, got 0"},
		{"charge", `{"amount":1,"_pause_before_commit":-1}`, true, tool.ErrInvalidArgs, "got -1"},
		{"charge", `{"amount":1,"_pause_before_commit":10.5}`, true, tool.ErrInvalidArgs, "got 10.5"},
		{"charge", `{"amount":1,"_pause_before_commit":"1"}`, true, tool.ErrInvalidArgs, `got string "1"`},
		{"charge", `{"amount":1,"_pause_before_commit":true}`, true, tool.ErrInvalidArgs, "got boolean true"},
		{"charge", `{"amount":1,"_pause_before_commit":[1]}`, true, tool.ErrInvalidArgs, "got an array"},
		{"charge", `{"amount":1,"_pause_later":1}`, true, tool.ErrInvalidArgs, "_pause_before_commit)"}, // the allowed list names it
		{"charge", `{"_pause_before_commit":1}`, true, tool.ErrInvalidArgs, "amount is required"},
	}
	for _, c := range cases {
		name := c.tool + " " + c.args
		if c.chaos {
			name += " chaos"
		}
		t.Run(name, func(t *testing.T) {
			err := Validate(c.tool, args(t, c.args), c.chaos)
			if c.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want one wrapping %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.message) {
				t.Errorf("error %q does not mention %q", err, c.message)
			}
		})
	}
}

func TestValidateNilArgsAndGoNumbers(t *testing.T) {
	if err := Validate(Fail, nil, false); err != nil {
		t.Errorf("fail with nil args: %v", err)
	}
	if err := Validate(Charge, nil, false); !errors.Is(err, tool.ErrInvalidArgs) {
		t.Errorf("charge with nil args: %v", err)
	}
	if err := Validate(Charge, map[string]any{"amount": 5}, false); err != nil {
		t.Errorf("charge with int amount: %v", err)
	}
	if err := Validate(Charge, map[string]any{"amount": 5.5}, false); !errors.Is(err, tool.ErrInvalidArgs) {
		t.Errorf("charge with float 5.5: %v", err)
	}
}

func TestRunCharge(t *testing.T) {
	ctx := context.Background()
	inv := tool.Invocation{CallID: "c_1111111111111111", Tool: Charge, Args: args(t, `{"amount":1.0e2,"_crash_after_commit":true}`), Attempt: 1}
	out, err := Run(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	eff := tool.EffectID(inv.CallID)
	if want := `{"charged":100,"effect_id":"` + eff + `"}`; string(out.Result) != want {
		t.Errorf("result = %s, want %s", out.Result, want)
	}
	if out.Err != nil {
		t.Errorf("unexpected tool error %+v", out.Err)
	}
	e := out.Effect
	if e == nil || e.EffectID != eff || e.CallID != inv.CallID || e.Tool != Charge || e.Amount == nil || *e.Amount != 100 {
		t.Fatalf("effect = %+v", e)
	}
	// A second attempt of the same call presents the same effect id.
	inv.Attempt = 2
	out2, err := Run(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	if out2.Effect.EffectID != eff || string(out2.Result) != string(out.Result) {
		t.Errorf("attempt 2 differs: %s %+v", out2.Result, out2.Effect)
	}
}

func TestRunSendEmail(t *testing.T) {
	inv := tool.Invocation{CallID: "c_2222222222222222", Tool: SendEmail, Args: args(t, `{"to":"rene\u0301@x","subject":"s"}`), Attempt: 1}
	out, err := Run(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	eff := tool.EffectID(inv.CallID)
	if want := `{"sent":true,"to":"ren` + "\u00e9" + `@x","effect_id":"` + eff + `"}`; string(out.Result) != want {
		t.Errorf("result = %s, want %s", out.Result, want)
	}
	if e := out.Effect; e == nil || e.EffectID != eff || e.CallID != inv.CallID || e.Tool != SendEmail || e.Amount != nil {
		t.Errorf("effect = %+v, want one with nil amount", e)
	}
}

func TestResultNotHTMLEscaped(t *testing.T) {
	inv := tool.Invocation{CallID: "c_3333333333333333", Tool: SendEmail, Args: args(t, `{"to":"a&b<c>@x"}`), Attempt: 1}
	out, err := Run(context.Background(), inv)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.Result), `"to":"a&b<c>@x"`) {
		t.Fatalf("result = %s, want the address as written, not HTML-escaped", out.Result)
	}
}

func TestRunSleep(t *testing.T) {
	out, err := Run(context.Background(), tool.Invocation{CallID: "c_3", Tool: Sleep, Args: args(t, `{"seconds":0.01}`), Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Result) != `{"slept":0.01}` || out.Effect != nil || out.Err != nil {
		t.Errorf("outcome = %s %+v %+v", out.Result, out.Effect, out.Err)
	}
}

func TestRunSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out tool.Outcome
	go func() {
		var err error
		out, err = Run(ctx, tool.Invocation{CallID: "c_4", Tool: Sleep, Args: args(t, `{"seconds":10}`), Attempt: 1})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if out.Result != nil || out.Err != nil {
			t.Errorf("an abandoned attempt reported an outcome: %+v", out)
		}
	case <-time.After(5 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("sleep ignored cancellation")
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := Run(ctx, tool.Invocation{CallID: "c_5", Tool: Charge, Args: args(t, `{"amount":1}`), Attempt: 1})
	if !errors.Is(err, context.Canceled) || out.Effect != nil {
		t.Errorf("charge on a cancelled ctx: %+v, %v", out, err)
	}
}

func TestRunFail(t *testing.T) {
	type want struct {
		ok        bool
		message   string
		retryable bool
	}
	cases := []struct {
		args string
		want [3]want // attempts 1, 2, 3
	}{
		{`{}`, [3]want{
			{false, defaultFailMessage, true}, {false, defaultFailMessage, true}, {false, defaultFailMessage, true}}},
		{`{"retryable":false,"message":"card declined"}`, [3]want{
			{false, "card declined", false}, {false, "card declined", false}, {false, "card declined", false}}},
		{`{"times":0}`, [3]want{{ok: true}, {ok: true}, {ok: true}}},
		{`{"times":1}`, [3]want{{false, defaultFailMessage, true}, {ok: true}, {ok: true}}},
		{`{"times":2,"retryable":false}`, [3]want{
			{false, defaultFailMessage, false}, {false, defaultFailMessage, false}, {ok: true}}},
	}
	for _, c := range cases {
		for i, w := range c.want {
			attempt := int64(i + 1)
			out, err := Run(context.Background(), tool.Invocation{CallID: "c_6", Tool: Fail, Args: args(t, c.args), Attempt: attempt})
			if err != nil {
				t.Fatalf("%s attempt %d: %v", c.args, attempt, err)
			}
			if out.Effect != nil {
				t.Errorf("%s attempt %d: fail produced an effect", c.args, attempt)
			}
			if w.ok {
				if out.Err != nil || string(out.Result) != `{"ok":true}` {
					t.Errorf("%s attempt %d: want success, got %s %+v", c.args, attempt, out.Result, out.Err)
				}
				continue
			}
			wantErr := tool.ToolError{Code: "tool_failed", Message: w.message, Retryable: w.retryable}
			if out.Result != nil || out.Err == nil || !reflect.DeepEqual(*out.Err, wantErr) {
				t.Errorf("%s attempt %d: got %s %+v, want error %+v", c.args, attempt, out.Result, out.Err, wantErr)
			}
		}
	}
}

func TestRunRefusesInvalid(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, tool.Invocation{CallID: "c_7", Tool: "refund", Args: map[string]any{}, Attempt: 1}); !errors.Is(err, tool.ErrUnknownTool) {
		t.Errorf("unknown tool: %v", err)
	}
	if _, err := Run(ctx, tool.Invocation{CallID: "c_7", Tool: Charge, Args: map[string]any{"amount": "1"}, Attempt: 1}); !errors.Is(err, tool.ErrInvalidArgs) {
		t.Errorf("bad args: %v", err)
	}
}

// TestUnknownArgumentNamedIsTheFirstSorted: of several unknown arguments,
// the error names the first in sorted order, whatever order the map
// yields them in (asked many times: the order changes between loops).
func TestUnknownArgumentNamedIsTheFirstSorted(t *testing.T) {
	args := map[string]any{"amount": json.Number("1"), "zeta": true, "currency": "EUR", "beta": 2.0, "omega": nil, "_crash_after_commit": true}
	for range 50 {
		err := Validate(Charge, args, true)
		if err == nil || !strings.Contains(err.Error(), `unknown argument "beta"`) {
			t.Fatalf("error %v, want it to name \"beta\"", err)
		}
	}
}
