package toolreg

import (
	"fmt"

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
