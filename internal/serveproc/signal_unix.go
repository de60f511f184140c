//go:build unix

package serveproc

import (
	"os"
	"syscall"
)

// terminate asks the process to shut down cleanly.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
