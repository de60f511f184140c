package main

import (
	"errors"
	"fmt"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// ExitError carries a specific exit status out of a command: fault, bench
// and inspect dupes exit exitcode.Failed when an invariant breaks, call when
// the call failed; runtime failures exit exitcode.Error (see runtimeError).
type ExitError struct {
	Code int
	Err  error // may be nil when the command already printed its verdict
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// runtimeError marks err, returned by a command's run function after its
// options were accepted, as a runtime failure (exitcode.Error): the database
// is unreachable, the port is taken. An *ExitError already carries its own
// status and passes through. Errors that reach Main unmarked come from
// cobra's parsing, Validate or the configuration: usage errors.
func runtimeError(err error) error {
	if err == nil {
		return nil
	}
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		return err
	}
	return &ExitError{Code: exitcode.Error, Err: err}
}
