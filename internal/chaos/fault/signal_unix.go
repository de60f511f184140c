//go:build unix

package fault

import (
	"os"
	"syscall"
)

// canFreeze: SIGSTOP/SIGCONT exist here, so lease-expiry can run.
const canFreeze = true

// freeze stops the process where it stands (it cannot catch SIGSTOP).
func freeze(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// thaw resumes a stopped process.
func thaw(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// terminate asks the process to shut down cleanly.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
