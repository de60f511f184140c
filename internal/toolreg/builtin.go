package toolreg

import (
	"fmt"
	"maps"
	"slices"

	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// builtinSpec is how a built-in tool is described in the registry. The
// schema is what GET /v1/tools publishes; the arguments themselves are
// checked by builtin.Validate, so that its messages and the rules a schema
// cannot say (send_email.to not only whitespace, the chaos "_" arguments)
// stay exactly as they were. TestBuiltinSchemasAgree holds the two
// together.
type builtinSpec struct {
	description string
	effect      bool
	schema      string
}

var builtinSpecs = map[string]builtinSpec{
	builtin.Charge: {
		description: "Charge an amount (simulated: records one effect row with the amount).",
		effect:      true,
		schema: fmt.Sprintf(`{"type": "object", "additionalProperties": false, "required": ["amount"],
			"properties": {"amount": {"type": "integer", "minimum": 1, "maximum": %d}}}`, int64(builtin.MaxChargeAmount)),
	},
	builtin.SendEmail: {
		description: "Send an email (simulated: records one effect row, nothing is sent).",
		effect:      true,
		schema: `{"type": "object", "additionalProperties": false, "required": ["to"],
			"properties": {"to": {"type": "string", "pattern": "\\S"},
				"subject": {"type": "string"}, "body": {"type": "string"}}}`,
	},
	builtin.Sleep: {
		description: "Wait, with no side effect.",
		schema: fmt.Sprintf(`{"type": "object", "additionalProperties": false, "required": ["seconds"],
			"properties": {"seconds": {"type": "number", "minimum": 0, "maximum": %d}}}`, builtin.MaxSleepSeconds),
	},
	builtin.Fail: {
		description: "Fail, to exercise error handling (or succeed after the first times attempts).",
		schema: `{"type": "object", "additionalProperties": false,
			"properties": {"retryable": {"type": "boolean"}, "times": {"type": "integer", "minimum": 0},
				"message": {"type": "string"}}}`,
	},
}

var builtins = mustBuiltins()

// Builtins returns the registry of the four built-in tools with their
// default policy: what a server without a tools file runs.
func Builtins() *Registry { return builtins }

func mustBuiltins() *Registry {
	r := &Registry{tools: map[string]*Tool{}}
	for _, name := range builtin.Names() {
		t, err := newBuiltin(name)
		if err != nil {
			panic(err) // static data
		}
		r.tools[name] = t
	}
	r.names = slices.Sorted(maps.Keys(r.tools))
	return r
}

func newBuiltin(name string) (*Tool, error) {
	spec := builtinSpecs[name]
	sch, raw, err := compileSchema(name, []byte(spec.schema))
	if err != nil {
		return nil, fmt.Errorf("built-in %s: %w", name, err)
	}
	return &Tool{Name: name, Kind: KindBuiltin, Description: spec.description, Effect: spec.effect,
		Retry:      Retry{MaxAttempts: defaultMaxAttempts, InitialBackoff: defaultInitialBackoff, MaxBackoff: defaultMaxBackoff},
		schemaJSON: raw, schema: sch, runner: tool.RunnerFunc(builtin.Run)}, nil
}
