// Package builtin holds the four simulated tools idemctl always registers
// (docs/tools.md): charge, send_email, sleep and fail, with the validation
// of their arguments.
//
// Validation happens before a key is recorded (a refused request stores
// nothing); Run executes one attempt of an already validated call and
// returns the effect row, if any, for the caller to record (tool.Outcome).
package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// Tool names (docs/tools.md).
const (
	Charge    = "charge"
	SendEmail = "send_email"
	Sleep     = "sleep"
	Fail      = "fail"
)

// Limits on arguments.
const (
	// MaxChargeAmount caps charge.amount (in minor units). It is far below
	// 2^53, so every accepted amount is an exact int64 and an exact double.
	MaxChargeAmount = 1_000_000_000_000
	// MaxSleepSeconds caps sleep.seconds; the default lease (30s) must stay
	// longer than the longest tool.
	MaxSleepSeconds = 10
)

// errorCodeToolFailed is the code of the error a failing tool reports.
const errorCodeToolFailed = wire.CodeToolFailed

// defaultFailMessage is the fail tool's message when none is given.
const defaultFailMessage = "simulated failure"

var names = []string{Charge, Fail, SendEmail, Sleep} // sorted

// Names returns the known tool names, sorted.
func Names() []string { return append([]string(nil), names...) }

// Known reports whether name is a built-in tool.
func Known(name string) bool {
	return slices.Contains(names, name)
}

// Validate checks a tool name and its (normalized) arguments. An unknown tool
// wraps tool.ErrUnknownTool; bad arguments wrap tool.ErrInvalidArgs with a
// message that names the argument. Argument names starting with "_" are
// the chaos hooks', checked by tool.ValidateChaos.
func Validate(name string, args map[string]any, chaos bool) error {
	if !Known(name) {
		return fmt.Errorf("%w %q (known tools: %s)", tool.ErrUnknownTool, name, strings.Join(names, ", "))
	}
	if err := tool.ValidateChaos(name, args, chaos); err != nil {
		return err
	}
	_, err := parse(name, args)
	return err
}

// Run executes one attempt of a validated call (a tool.Runner through
// tool.RunnerFunc). It returns an Outcome when the tool ran to completion
// (successfully or with a ToolError). A non-nil error means there is no
// outcome to record: ctx was cancelled before the tool finished (ctx.Err():
// the attempt is abandoned and the lease will bring the call back), or the
// invocation is one Validate would have refused.
func Run(ctx context.Context, inv tool.Invocation) (tool.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return tool.Outcome{}, err
	}
	p, err := parse(inv.Tool, inv.Args)
	if err != nil {
		return tool.Outcome{}, err
	}
	switch a := p.(type) {
	case chargeArgs:
		eff := tool.EffectID(inv.CallID)
		amount := a.Amount
		return success(chargeResult{Charged: amount, EffectID: eff},
			&store.Effect{EffectID: eff, CallID: inv.CallID, Tool: inv.Tool, Amount: &amount})
	case emailArgs:
		eff := tool.EffectID(inv.CallID)
		return success(emailResult{Sent: true, To: a.To, EffectID: eff},
			&store.Effect{EffectID: eff, CallID: inv.CallID, Tool: inv.Tool})
	case sleepArgs:
		t := time.NewTimer(time.Duration(a.Seconds * float64(time.Second)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return tool.Outcome{}, ctx.Err()
		case <-t.C:
		}
		return success(sleepResult{Slept: a.Seconds}, nil)
	case failArgs:
		// times: N means attempts 1..N fail and later ones succeed.
		if a.Times != nil && inv.Attempt > *a.Times {
			return success(okResult{OK: true}, nil)
		}
		return tool.Outcome{Err: &tool.ToolError{Code: errorCodeToolFailed, Message: a.Message, Retryable: a.Retryable}}, nil
	}
	return tool.Outcome{}, fmt.Errorf("builtin: no runner for %q", inv.Tool) // unreachable: parse knows every tool
}

// Result shapes. Structs, so the JSON member order is fixed.
type chargeResult struct {
	Charged  int64  `json:"charged"`
	EffectID string `json:"effect_id"`
}

type emailResult struct {
	Sent     bool   `json:"sent"`
	To       string `json:"to"`
	EffectID string `json:"effect_id"`
}

type sleepResult struct {
	Slept float64 `json:"slept"`
}

type okResult struct {
	OK bool `json:"ok"`
}

func success(result any, eff *store.Effect) (tool.Outcome, error) {
	// Without HTML escaping: a result is stored and served as the tool
	// produced it ("a&b" stays "a&b", not "a\u0026b").
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(result); err != nil {
		return tool.Outcome{}, fmt.Errorf("builtin: marshal result: %w", err)
	}
	return tool.Outcome{Result: bytes.TrimRight(buf.Bytes(), "\n"), Effect: eff}, nil
}

// Parsed arguments, one type per tool.
type chargeArgs struct{ Amount int64 }

type emailArgs struct{ To, Subject, Body string }

type sleepArgs struct{ Seconds float64 }

type failArgs struct {
	Retryable bool
	Times     *int64
	Message   string
}

// allowed lists each tool's argument names (chaos "_" names are handled by
// Validate and ignored here).
var allowed = map[string][]string{
	Charge:    {"amount"},
	SendEmail: {"body", "subject", "to"},
	Sleep:     {"seconds"},
	Fail:      {"message", "retryable", "times"},
}

// parse checks and converts a tool's arguments.
func parse(name string, args map[string]any) (any, error) {
	argNames, ok := allowed[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known tools: %s)", tool.ErrUnknownTool, name, strings.Join(Names(), ", "))
	}
	// The unknown argument named is the first in sorted order, whatever
	// the map's: the least one, found without sorting every call's names.
	unknown, found := "", false
	for arg := range args {
		if tool.IsChaosArg(arg) || slices.Contains(argNames, arg) {
			continue
		}
		if !found || arg < unknown {
			unknown, found = arg, true
		}
	}
	if found {
		return nil, fmt.Errorf("%w: %s: unknown argument %q (allowed: %s)", tool.ErrInvalidArgs, name, unknown, strings.Join(argNames, ", "))
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", tool.ErrInvalidArgs, name, fmt.Sprintf(format, a...))
	}
	switch name {
	case Charge:
		v, ok := args["amount"]
		if !ok {
			return nil, bad("amount is required")
		}
		// 1.0 is accepted as 1: it has the same fingerprint, so it must
		// mean the same call.
		n, ok := tool.Integer(v)
		if !ok || n < 1 || n > MaxChargeAmount {
			return nil, bad("amount must be an integer from 1 to %d, got %s", int64(MaxChargeAmount), tool.Describe(v))
		}
		return chargeArgs{Amount: n}, nil
	case SendEmail:
		to, ok := args["to"].(string)
		if !ok || strings.TrimSpace(to) == "" {
			return nil, bad("to must be a non-empty string, got %s", tool.Describe(args["to"]))
		}
		a := emailArgs{To: to}
		for _, f := range []struct {
			name string
			dst  *string
		}{{"subject", &a.Subject}, {"body", &a.Body}} {
			v, present := args[f.name]
			if !present {
				continue
			}
			s, ok := v.(string)
			if !ok {
				return nil, bad("%s must be a string, got %s", f.name, tool.Describe(v))
			}
			*f.dst = s
		}
		return a, nil
	case Sleep:
		v, ok := args["seconds"]
		if !ok {
			return nil, bad("seconds is required")
		}
		s, ok := tool.Number(v)
		if !ok || s < 0 || s > MaxSleepSeconds {
			return nil, bad("seconds must be a number from 0 to %d, got %s", MaxSleepSeconds, tool.Describe(v))
		}
		return sleepArgs{Seconds: s}, nil
	case Fail:
		a := failArgs{Retryable: true, Message: defaultFailMessage}
		if v, ok := args["retryable"]; ok {
			b, isBool := v.(bool)
			if !isBool {
				return nil, bad("retryable must be a boolean, got %s", tool.Describe(v))
			}
			a.Retryable = b
		}
		if v, ok := args["times"]; ok {
			n, isInt := tool.Integer(v)
			if !isInt || n < 0 {
				return nil, bad("times must be an integer >= 0, got %s", tool.Describe(v))
			}
			a.Times = &n
		}
		if v, ok := args["message"]; ok {
			s, isString := v.(string)
			if !isString {
				return nil, bad("message must be a string, got %s", tool.Describe(v))
			}
			if s != "" {
				a.Message = s
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("%w %q", tool.ErrUnknownTool, name) // unreachable: allowed has every tool
}
