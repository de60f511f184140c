//go:build !unix

package serveproc

import "os"

// terminate has no graceful signal here: kill.
func terminate(p *os.Process) error { return p.Kill() }
