package executor

import (
	"fmt"

	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// capResult turns a success whose result exceeds max bytes into a
// failure, not retryable (the same tool would return the same result),
// and drops its effect with it: the call fails instead of bloating the
// database (docs/api.md, "Limits").
func capResult(out tool.Outcome, max int) tool.Outcome {
	if out.Err != nil || len(out.Result) <= max {
		return out
	}
	return tool.Outcome{Err: &tool.ToolError{Code: wire.CodeResultTooLarge,
		Message: fmt.Sprintf("the tool's result is %d bytes; this server stores at most %d", len(out.Result), max)}}
}
