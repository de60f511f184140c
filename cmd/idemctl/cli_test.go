package main

import (
	"bytes"
	"strings"
	"testing"
)

// cliRun runs idemctl with args, with buffers for streams (which are then
// not terminals), and returns stdout, stderr and the exit status, as a user
// would see them. It is the one way the tests run a command.
func cliRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(t.Context(), args, &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return out.String(), errOut.String(), code
}
