package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/idemctl/idemctl/internal/failpoint"
	"github.com/idemctl/idemctl/internal/store"
)

// loadFailpoints reads IDEMCTL_FAILPOINTS for serve (docs/failpoints.md).
// It is refused without --chaos: failpoints crash the process and fail
// writes on purpose, and a production server must never start with them
// by accident. Empty counts as unset, as for every IDEMCTL_* variable.
func loadFailpoints(chaos bool) (*failpoint.Registry, error) {
	spec := os.Getenv(failpoint.EnvVar)
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	if !chaos {
		return nil, errors.New(failpoint.EnvVar + " is set but --chaos is not: failpoints crash the server and fail writes on purpose, so they are armed only with --chaos (loopback only); unset " + failpoint.EnvVar + " to run normally")
	}
	return failpoint.Parse(spec)
}

// armFailpoints arms reg (nil: nothing) for this process, logs which
// points are armed, and returns st with the after-commit points around
// its writes.
func armFailpoints(reg *failpoint.Registry, st store.Store, logger *slog.Logger) store.Store {
	if reg == nil {
		return st
	}
	failpoint.Enable(reg, logger)
	logger.Warn(fmt.Sprintf("failpoints armed: %d", len(reg.Armed())), "failpoints", reg.String())
	return failpoint.Wrap(st)
}
