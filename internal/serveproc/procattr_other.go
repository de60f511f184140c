//go:build !linux

package serveproc

import "os/exec"

// startChild starts cmd; without Pdeathsig, a starter killed outright leaves
// its server running.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
