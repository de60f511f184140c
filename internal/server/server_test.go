package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/wire"
)

func TestChaosRefusedOffLoopback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, addr := range []string{"0.0.0.0:8081", ":8081", "10.1.2.3:80", "[::]:80", "example.com:80", "nonsense"} {
		if _, err := New(Config{Addr: addr, Config: executor.Config{Chaos: true}}, b.st); err == nil {
			t.Errorf("chaos on %q accepted", addr)
		}
		if addr != "nonsense" {
			if _, err := New(Config{Addr: addr, InsecureNoAuth: true}, b.st); err != nil {
				t.Errorf("non-chaos on %q refused: %v", addr, err)
			}
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "127.9.9.9:80", "[::1]:80", "localhost:8081", "LOCALHOST:1"} {
		if _, err := New(Config{Addr: addr, Config: executor.Config{Chaos: true}}, b.st); err != nil {
			t.Errorf("chaos on %q refused: %v", addr, err)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, cfg := range []Config{{Config: executor.Config{Workers: -1}}, {Config: executor.Config{Lease: -time.Second}},
		{Config: executor.Config{Lease: executor.MinLease - time.Millisecond}}, {Config: executor.Config{RecoverInterval: -1}},
		{MaxWait: -1}, {MaxConcurrentBodies: -1}, {MaxHeldWaits: -1}} {
		if _, err := New(cfg, b.st); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	// The shortest lease is accepted; the defaults are the documented ones.
	srv, err := New(Config{Config: executor.Config{Lease: executor.MinLease}}, b.st)
	if err != nil {
		t.Fatalf("lease %s refused: %v", executor.MinLease, err)
	}
	if srv.cfg.Workers != 256 || srv.cfg.MaxPending != 100_000 {
		t.Errorf("defaults: workers %d max pending %d, want 256 and 100000", srv.cfg.Workers, srv.cfg.MaxPending)
	}
	if _, err := New(Config{}, nil); err == nil {
		t.Error("nil store accepted")
	}
}

func TestMetricsMove(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c1 := b.post("k-m1", `{"tool":"charge","args":{"amount":1}}`).call(t)
	c2 := b.post("k-m2", `{"tool":"fail","args":{"retryable":false}}`).call(t)
	b.waitFinal(c1.CallID)
	b.waitFinal(c2.CallID)
	b.post("k-m1", `{"tool":"charge","args":{"amount":1}}`) // replay
	b.post("k-m1", `{"tool":"charge","args":{"amount":2}}`) // conflict
	b.post("", `{}`)                                        // 400

	want := map[string]float64{
		`idemctl_calls_total{outcome="created"}`:                                       2,
		`idemctl_calls_total{outcome="replayed"}`:                                      1,
		`idemctl_calls_total{outcome="conflict"}`:                                      1,
		`idemctl_executions_total{outcome="succeeded",tool="charge"}`:                  1,
		`idemctl_executions_total{outcome="failed",tool="fail"}`:                       1,
		`idemctl_execution_attempt_count`:                                              2,
		`idemctl_execution_duration_seconds_count{tool="charge"}`:                      1,
		`idemctl_http_requests_total{code="202",route="POST /v1/tool-calls"}`:          2,
		`idemctl_http_requests_total{code="409",route="POST /v1/tool-calls"}`:          1,
		`idemctl_http_requests_total{code="400",route="POST /v1/tool-calls"}`:          1,
		`idemctl_http_requests_total{code="200",route="GET /v1/tool-calls/{call_id}"}`: -1, // any positive
		`idemctl_queue_depth`:                              0,
		`idemctl_workers_busy`:                             0,
		`idemctl_fenced_commits_total`:                     0,
		`idemctl_lease_recoveries_total{reason="expired"}`: 0,
	}
	for series, v := range want {
		got := b.metricValue(series)
		if (v < 0 && got <= 0) || (v >= 0 && got != v) {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
}

// TestRunServesAndStops: Run on a real listener answers, and returns nil
// after ctx is cancelled.
func TestRunServesAndStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, err := New(Config{Logger: testLogger(t)}, b.st)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := netListen(t)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Run(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	r := doURL(t, base, http.MethodPost, "/v1/tool-calls", []byte(`{"tool":"charge","args":{"amount":8}}`),
		map[string]string{"Idempotency-Key": "k-run", "Prefer": "wait=10"})
	var c wire.Call
	_ = json.Unmarshal(r.body, &c)
	if r.status != http.StatusOK || c.Status != "succeeded" {
		t.Fatalf("POST via Run: %d %s", r.status, r.body)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitDeadline):
		t.Fatal("Run did not return after cancel")
	}
}
