package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serve runs an http.Server with h on a Listener limited as given.
func serve(t *testing.T, maxConns, maxIdle int, h http.Handler) *Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, maxConns, maxIdle)
	hs := &http.Server{Handler: h, ConnState: l.ConnState, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	return l
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// keepAlive opens a connection and makes one request on it, leaving it
// open and idle. status is 0 when the connection was closed instead.
func keepAlive(t *testing.T, addr string) (net.Conn, int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return c, 0
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return c, res.StatusCode
}

// closedByServer reports whether the server closed c (a read ends at once
// with EOF or a reset instead of timing out).
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleFloodLeavesRoom: a client holding many idle keep-alive
// connections cannot lock others out: at the limit, each new connection
// takes the place of the one idle the longest, the count never exceeds
// the limit, and a fresh client is answered.
func TestIdleFloodLeavesRoom(t *testing.T) {
	const limit = 10
	l := serve(t, limit, 0, ok)
	addr := l.Addr().String()
	var flood []net.Conn
	for i := range 4 * limit {
		c, status := keepAlive(t, addr)
		if status != http.StatusOK {
			t.Fatalf("flood connection %d: status %d, want 200 (idle ones make room)", i, status)
		}
		flood = append(flood, c)
		if n := l.Len(); n > limit {
			t.Fatalf("%d connections open, limit %d", n, limit)
		}
	}
	if _, status := keepAlive(t, addr); status != http.StatusOK {
		t.Fatalf("fresh client after the flood: status %d, want 200", status)
	}
	if !closedByServer(flood[0]) {
		t.Fatal("the connection idle the longest is still open past the limit")
	}
	if l.Evicted.Load() < int64(3*limit) {
		t.Fatalf("evicted %d, want at least %d", l.Evicted.Load(), 3*limit)
	}
}

// TestBusyConnectionsAreNeverCut: at the limit with every connection in
// a request, a new connection is closed at once and counted; the requests
// in progress complete; afterwards new connections are served again.
func TestBusyConnectionsAreNeverCut(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	l := serve(t, 2, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	}))
	addr := l.Addr().String()
	results := make(chan int, 2)
	for range 2 {
		go func() {
			res, err := http.Get("http://" + addr + "/slow")
			if err != nil {
				results <- 0
				return
			}
			res.Body.Close()
			results <- res.StatusCode
		}()
	}
	<-entered
	<-entered
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedByServer(c) {
		t.Fatal("a connection past the limit, with none idle, was kept open")
	}
	if l.Refused.Load() != 1 {
		t.Fatalf("refused %d, want 1", l.Refused.Load())
	}
	close(release)
	for range 2 {
		if s := <-results; s != http.StatusOK {
			t.Fatalf("a request in progress at the limit got %d, want 200", s)
		}
	}
	if _, status := keepAlive(t, addr); status != http.StatusOK {
		t.Fatalf("after the busy requests: status %d, want 200", status)
	}
}

// TestIdlePerAddress: one address keeps at most maxIdle idle connections;
// past that, its connection idle the longest is closed.
func TestIdlePerAddress(t *testing.T) {
	l := serve(t, 0, 2, ok)
	addr := l.Addr().String()
	first, _ := keepAlive(t, addr)
	waitIdle(t, l, 1)
	second, _ := keepAlive(t, addr)
	waitIdle(t, l, 2)
	if _, status := keepAlive(t, addr); status != http.StatusOK {
		t.Fatalf("third connection: %d, want 200", status)
	}
	if !closedByServer(first) {
		t.Fatal("a third idle connection of one address left the oldest open")
	}
	if closedByServer(second) {
		t.Fatal("the second idle connection was closed too")
	}
	if n := l.Len(); n != 2 {
		t.Fatalf("%d connections open, want 2", n)
	}
}

func TestDefaultMaxConns(t *testing.T) {
	for _, c := range []struct {
		files   uint64
		reserve int
		want    int
	}{{1024, 512, 512}, {1 << 20, 512, 10_000}, {100, 512, 64}} {
		if got := DefaultMaxConns(c.files, c.reserve); got != c.want {
			t.Errorf("DefaultMaxConns(%d, %d) = %d, want %d", c.files, c.reserve, got, c.want)
		}
	}
}

// waitIdle waits until the server has marked n connections idle (it does
// so just after the answer went out, so the client may be faster).
func waitIdle(t *testing.T, l *Listener, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.idleLen() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections, want %d", l.idleLen(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
