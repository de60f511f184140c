package fault

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startChild starts cmd so that the kernel sends it SIGTERM if the runner
// dies without cleaning up (killed with SIGKILL, say): no server outlives
// its scenario. Pdeathsig fires when the thread that forked exits, so the
// fork happens on a locked thread; Go keeps that thread alive afterwards.
func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}
