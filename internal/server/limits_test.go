package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestBodyLimitOverloaded: with MaxConcurrentBodies bodies being read, the
// next POST is refused at once with 503 overloaded and Retry-After, stores
// nothing, and is counted; the slot comes back when the body is done.
func TestBodyLimitOverloaded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.MaxConcurrentBodies = 1 })
	if v := b.metricValue(`idemctl_limit_refusals_total{limit="bodies"}`); v != 0 {
		t.Fatalf("refusals before any load: %v", v)
	}

	// A POST whose body arrives only in part holds the one slot.
	conn, err := net.Dial("tcp", b.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"tool":"charge","args":{"amount":1}}`
	head := "POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Idempotency-Key: k-slow-body\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head+body[:10]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the slow body holds the slot", func() bool {
		return b.metricValue("idemctl_http_bodies_in_flight") == 1
	})

	before := b.snapshot()
	r := b.post("k-over-limit", body)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeOverloaded || r.header.Get("Retry-After") != "1" {
		t.Fatalf("got %d %s Retry-After %q, want 503 overloaded with Retry-After 1", r.status, r.body, r.header.Get("Retry-After"))
	}
	if !b.snapshot().equal(before) {
		t.Fatal("a request refused as overloaded changed the database")
	}
	if v := b.metricValue(`idemctl_limit_refusals_total{limit="bodies"}`); v != 1 {
		t.Fatalf("bodies refusals = %v, want 1", v)
	}

	// The slow body completes; its slot is given back.
	if _, err := io.WriteString(conn, body[10:]); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitDeadline))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("slow body: %d, want 202", res.StatusCode)
	}
	if v := b.metricValue("idemctl_http_bodies_in_flight"); v != 0 {
		t.Fatalf("bodies in flight after the slow body: %v, want 0", v)
	}
	if r := b.post("k-over-limit", body); r.status != http.StatusAccepted {
		t.Fatalf("same key after the load: %d %s, want 202", r.status, r.body)
	}
}

// TestWaitLimitAnswersAtOnce: with MaxHeldWaits requests held under
// "Prefer: wait", the next one is not held: it is answered at once with
// the call's current state and without Preference-Applied, and counted.
func TestWaitLimitAnswersAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) {
		c.MaxHeldWaits = 1
		c.ShutdownGrace = 50 * time.Millisecond // the sleep need not finish
	})
	c := b.post("k-held", `{"tool":"sleep","args":{"seconds":5}}`).call(t)

	var (
		wg   sync.WaitGroup
		held resp
	)
	wg.Go(func() { held = b.get(wire.CallPath(c.CallID), "Prefer", "wait=10") })
	eventually(t, "the first wait is held", func() bool {
		return b.metricValue("idemctl_http_waits_held") == 1
	})

	r := b.get(wire.CallPath(c.CallID), "Prefer", "wait=10")
	got := r.call(t)
	if r.status != http.StatusOK || got.Status.Final() || r.header.Get("Preference-Applied") != "" {
		t.Fatalf("over the limit: %d status %s Preference-Applied %q; want 200 at once, not final, no Preference-Applied",
			r.status, got.Status, r.header.Get("Preference-Applied"))
	}
	if v := b.metricValue(`idemctl_limit_refusals_total{limit="waits"}`); v != 1 {
		t.Fatalf("waits refusals = %v, want 1", v)
	}

	b.srv.beginClose() // held waits answer at once
	wg.Wait()
	if held.header.Get("Preference-Applied") != "wait=10" {
		t.Fatalf("the held request: Preference-Applied %q, want wait=10", held.header.Get("Preference-Applied"))
	}
	if v := b.metricValue("idemctl_http_waits_held"); v != 0 {
		t.Fatalf("waits held after release: %v, want 0", v)
	}
}

// TestBodyBytesBudget: with MaxBodyBytesInFlight bytes of bodies in
// flight, a POST whose declared length would pass the budget is refused
// with 503 overloaded before its body is read, stores nothing and is
// counted; a small body that fits is accepted; the bytes come back when
// the answer is written.
func TestBodyBytesBudget(t *testing.T) {
	b := setup(t, func(c *Config) { c.MaxBodyBytesInFlight = MaxBodyBytes })
	big := `{"tool":"send_email","args":{"to":"a@example.com","body":"` + strings.Repeat("x", 600<<10) + `"}}`

	// A POST whose body arrives only in part holds its 600 KiB.
	conn, err := net.Dial("tcp", b.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := "POST /v1/tool-calls HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Idempotency-Key: k-slow-big\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head+big[:10]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the slow body is being read", func() bool {
		return b.metricValue("idemctl_http_bodies_in_flight") == 1
	})

	before := b.snapshot()
	r := b.post("k-big-2", big)
	if r.status != http.StatusServiceUnavailable || r.errCode(t) != wire.CodeOverloaded || r.header.Get("Retry-After") != "1" {
		t.Fatalf("a second 600 KiB body with 1 MiB in flight: %d (%d bytes), want 503 overloaded", r.status, len(r.body))
	}
	if !b.snapshot().equal(before) {
		t.Fatal("a request refused for the byte budget changed the database")
	}
	if v := b.metricValue(`idemctl_limit_refusals_total{limit="body_bytes"}`); v != 1 {
		t.Fatalf("body_bytes refusals = %v, want 1", v)
	}
	if r := b.post("k-small", `{"tool":"charge","args":{"amount":1}}`); r.status != http.StatusAccepted {
		t.Fatalf("a small body that fits: %d %s, want 202", r.status, r.body)
	}

	if _, err := io.WriteString(conn, big[10:]); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitDeadline))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("slow big body: %d, want 202", res.StatusCode)
	}
	// The handler gives the bytes back just after its answer went out.
	eventually(t, "the same big body is accepted once the first was answered", func() bool {
		return b.post("k-big-2", big).status == http.StatusAccepted
	})
}
