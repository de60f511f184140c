package serveproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// startChild starts cmd so that the kernel sends it SIGTERM if the process
// that started it dies without cleaning up (idemctl fault or a test binary
// killed with SIGKILL, say): no server outlives its starter. Pdeathsig
// fires when the thread that forked exits, so the fork happens on a locked
// thread; Go keeps that thread alive afterwards.
func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}
