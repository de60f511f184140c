package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// cliRun runs idemctl with args, with buffers for streams (which are then
// not terminals), and returns stdout, stderr and the exit status, as a user
// would see them. It is the one way the tests run a command.
func cliRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return cliRunCtx(t.Context(), t, args...)
}

// cliRunCtx is cliRun under ctx, for a command that would otherwise run
// until the test ends (serve): cancelling ctx is its SIGINT.
func cliRunCtx(ctx context.Context, t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(ctx, args, &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return out.String(), errOut.String(), code
}
