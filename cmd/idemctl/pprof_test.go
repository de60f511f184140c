package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// TestServePprof: --pprof serves the runtime profiles on a listener of its
// own, stops with the server, and is refused off loopback.
func TestServePprof(t *testing.T) {
	t.Parallel()
	if _, errOut, code := cliRun(t, "serve", "--pprof", "0.0.0.0:6060", "--db", filepath.Join(t.TempDir(), "x.db")); code != exitcode.Usage || !strings.Contains(errOut, "--pprof") {
		t.Fatalf("--pprof off loopback: exit %d, stderr %q; want a usage error naming --pprof", code, errOut)
	}

	errOut := &serveBuffer{}
	root := newRootCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: errOut})
	root.SetArgs([]string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "idem.db"), "--pprof", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- root.ExecuteContext(ctx) }()

	// Both lines: the pprof server starts before the database is opened,
	// and a cancel during the start is an error of its own.
	var url string
	serving := false
	for deadline := time.Now().Add(10 * time.Second); url == "" || !serving; {
		for _, line := range strings.Split(errOut.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, pprofPrefix); ok {
				url = rest
			}
			serving = serving || strings.HasPrefix(line, "idemctl serving on ")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pprof line:\n%s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := http.Get(url + "cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "idemctl") {
		t.Fatalf("GET %scmdline: %d %q; want 200 with the process command line", url, res.StatusCode, body)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, err := http.Get(url + "cmdline"); err == nil {
		t.Fatal("the pprof server still answers after serve stopped")
	}
}

// TestPprofCmdlineRedacted: /debug/pprof/cmdline shows the command line
// with every --db password replaced, whether the DSN is a URL or key=value,
// given as "--db=VALUE" or as the next argument.
func TestPprofCmdlineRedacted(t *testing.T) {
	t.Parallel()
	args := []string{"idemctl", "serve", "--db=postgres://idem:url-secret@db:5432/idem?sslpassword=ssl-secret",
		"--db", "host=db password='kv secret' dbname=idem", "--addr", "127.0.0.1:8081"}
	rec := httptest.NewRecorder()
	redactedCmdline(args)(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/cmdline", nil))
	body := rec.Body.String()
	for _, secret := range []string{"url-secret", "ssl-secret", "kv secret"} {
		if strings.Contains(body, secret) {
			t.Errorf("cmdline shows %q: %q", secret, body)
		}
	}
	want := strings.Join([]string{"idemctl", "serve", "--db=postgres://idem:xxxxx@db:5432/idem?sslpassword=xxxxx",
		"--db", "host=db password=xxxxx dbname=idem", "--addr", "127.0.0.1:8081"}, "\x00")
	if body != want {
		t.Errorf("cmdline %q, want %q", body, want)
	}
}
