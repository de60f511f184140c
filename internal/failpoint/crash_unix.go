//go:build unix

package failpoint

import (
	"os"
	"syscall"
)

// crash kills the process with SIGKILL, as kill -9 would, and never
// returns.
func crash() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
