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
	return failpoint.Parse(spec, store.Failpoints())
}

// failpointOptions are the store's options with reg's before-commit points
// (nil: none) as its hook, inside each write's transaction.
func failpointOptions(reg *failpoint.Registry, logger *slog.Logger) store.Options {
	if reg == nil {
		return store.Options{}
	}
	reg.SetLogger(logger)
	return store.Options{BeforeCommit: store.FailpointHook(reg, store.Write.BeforeCommit)}
}

// armFailpoints logs which points of reg (nil: nothing) are armed, and
// returns st with the after-commit points around its writes.
func armFailpoints(reg *failpoint.Registry, st store.Store, logger *slog.Logger) store.Store {
	if reg == nil {
		return st
	}
	logger.Warn(fmt.Sprintf("failpoints armed: %d", len(reg.Armed())), "failpoints", reg.String())
	return store.Observe(st, store.Hooks{AfterCommit: store.FailpointHook(reg, store.Write.AfterCommit)})
}
