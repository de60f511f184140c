package serveproc

import (
	"context"
	"os"
	"sync"
	"time"
)

// built is the binary BuildOnce made for this process.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// BuildOnce is Build into a temporary directory, once per process: later
// calls return the first call's binary (or its error), so a test binary
// compiles idemctl at most once however many tests start servers.
// RemoveBuilt deletes it. It is here rather than in servertest because the
// server's own tests need it and cannot import servertest, which imports
// the server.
func BuildOnce() (string, error) {
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "idemctl-bin-")
		if built.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		built.bin, built.err = Build(ctx, built.dir)
	})
	return built.bin, built.err
}

// RemoveBuilt removes the binary BuildOnce built, if any (a test's
// TestMain calls it after m.Run).
func RemoveBuilt() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}
