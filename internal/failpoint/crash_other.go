//go:build !unix

package failpoint

import "os"

// crash ends the process at once where there is no SIGKILL to send: no
// deferred code runs (os.Exit), status 137 like a SIGKILL seen by a shell.
func crash() { os.Exit(137) }
