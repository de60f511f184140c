// Package servertest runs the real idemctl binary for tests that need a
// process boundary: a crash (os.Exit, SIGKILL), a restart on the same
// database, several servers at once.
//
// Typical use, in a package's TestMain:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		servertest.Cleanup() // removes the binary built by Binary
//		os.Exit(code)
//	}
//
// and in a test:
//
//	bin := servertest.Binary(t) // go build once per test process; skips under -short
//	p := servertest.StartServe(t, bin, "--db", dbPath, "--chaos")
//	resp, err := http.Get(p.URL + "/healthz")
//	p.Kill() // SIGKILL
package servertest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MainPackage is the import path of the idemctl command.
const MainPackage = "github.com/idemctl/idemctl/cmd/idemctl"

// ServingPrefix starts the line `idemctl serve` prints once it listens:
// "idemctl serving on http://ADDR (db: ..., workers N, lease L)".
const ServingPrefix = "idemctl serving on "

// StartTimeout bounds how long StartServe waits for the serving line.
const StartTimeout = 20 * time.Second

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// Build compiles the idemctl command into dir and returns the binary's
// path. It runs `go build` from the current directory, which must be inside
// the module (as a test's working directory is).
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "idemctl")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, MainPackage)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", MainPackage, err, out)
	}
	return bin, nil
}

// Binary returns the idemctl binary, built once per test process into a
// temporary directory (see Cleanup). Under -short it skips the test: these
// tests start processes and take seconds. A build failure fails the test
// with the compiler's output.
func Binary(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("skipping: starts real idemctl processes (go build ./cmd/idemctl); run without -short")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "idemctl-bin-")
		if buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		buildBin, buildErr = Build(ctx, buildDir)
	})
	if buildErr != nil {
		tb.Fatalf("building idemctl: %v", buildErr)
	}
	return buildBin
}

// Cleanup removes the binary Binary built, if any. Call it from TestMain
// after m.Run.
func Cleanup() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// Process is a running `idemctl serve`.
type Process struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:40123".
	URL string
	// Cmd is the underlying command (Cmd.Process.Pid for the pid).
	Cmd *exec.Cmd

	stderr *syncBuffer
	done   chan struct{}
	state  *os.ProcessState
}

// StartServe starts `bin serve --addr 127.0.0.1:0 args...` and waits for
// its serving line. Later flags override earlier ones, so args may set
// --addr. The process is killed at the end of the test if still running;
// its stderr is logged when the test failed.
func StartServe(tb testing.TB, bin string, args ...string) *Process {
	tb.Helper()
	full := append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, full...)
	cmd.Env = cleanEnv()
	p := &Process{Cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", bin, err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Text()
			p.stderr.WriteLine(line)
			if !found && strings.HasPrefix(line, ServingPrefix) {
				found = true
				rest := strings.TrimPrefix(line, ServingPrefix)
				u, _, _ := strings.Cut(rest, " ")
				urls <- u
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		_ = pw.Close()
		close(p.done)
	}()
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("stderr of idemctl %s:\n%s", strings.Join(full, " "), p.Stderr())
		}
	})
	select {
	case p.URL = <-urls:
		return p
	case <-p.done:
		tb.Fatalf("idemctl %s exited before serving (%v):\n%s", strings.Join(full, " "), p.state, p.Stderr())
	case <-time.After(StartTimeout):
		tb.Fatalf("idemctl %s did not print %q within %s:\n%s", strings.Join(full, " "), ServingPrefix, StartTimeout, p.Stderr())
	}
	return nil
}

// cleanEnv drops IDEMCTL_* variables so the caller's environment cannot
// change the flags a test passes.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEMCTL_") {
			env = append(env, kv)
		}
	}
	return env
}

// Pid is the process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Done is closed when the process has exited (and been reaped).
func (p *Process) Done() <-chan struct{} { return p.done }

// Stderr returns everything the process wrote to stderr so far.
func (p *Process) Stderr() string { return p.stderr.String() }

// Kill sends SIGKILL (no cleanup of any kind in the process) and waits for
// it to be reaped. A process that already exited is left alone.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to timeout for the exit; it returns the
// exit code, or an error if the process did not exit in time (it is then
// killed).
func (p *Process) Stop(timeout time.Duration) (int, error) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	return p.Wait(timeout)
}

// Wait waits up to timeout for the process to exit by itself and returns its
// exit code (-1 when killed by a signal). On timeout the process is killed
// and an error returned.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.state.ExitCode(), nil
	case <-time.After(timeout):
		p.Kill()
		return -1, errors.New("process did not exit within " + timeout.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) WriteLine(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
	b.buf.WriteByte('\n')
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
