//go:build !linux

package fault

import "os/exec"

// startChild starts cmd; without Pdeathsig, a runner killed outright leaves
// its server running.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
