//go:build !unix

package fault

import (
	"errors"
	"os"
)

// canFreeze: without SIGSTOP the lease-expiry scenario cannot pause a
// server, so it reports itself as not runnable here.
const canFreeze = false

var errNoFreeze = errors.New("freezing a process needs SIGSTOP (unix only)")

func freeze(*os.Process) error { return errNoFreeze }

func thaw(*os.Process) error { return errNoFreeze }

// terminate has no graceful signal here: kill.
func terminate(p *os.Process) error { return p.Kill() }
