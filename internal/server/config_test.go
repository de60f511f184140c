package server

import (
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/executor"
)

// TestConfigValidate: Validate refuses each bad value with a message
// naming serve's flag, reports every bad value at once, checks values as
// they are (a zero that New would fill is refused), and accepts a complete
// configuration, auth on a non-loopback address included.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := func() Config {
		return Config{Addr: "127.0.0.1:8081", Config: executor.Config{Workers: 1, Lease: executor.MinLease, MaxResultBytes: 1},
			MaxConcurrentBodies: 1, MaxHeldWaits: 1, MaxBodyBytesInFlight: MaxBodyBytes}
	}
	if c := good(); c.Validate() != nil {
		t.Fatalf("good config refused: %v", c.Validate())
	}
	withAuth := good()
	withAuth.Addr, withAuth.Auth = "0.0.0.0:8081", NewAuth("tokens-not-read")
	if err := withAuth.Validate(); err != nil {
		t.Fatalf("auth on a non-loopback address refused: %v", err)
	}
	cases := map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"empty addr":     {func(c *Config) { c.Addr = "" }, "--addr must not be empty"},
		"workers 0":      {func(c *Config) { c.Workers = 0 }, "--workers must be at least 1, got 0"},
		"short lease":    {func(c *Config) { c.Lease = executor.MinLease - time.Millisecond }, "--lease must be at least 1s, got 999ms"},
		"grace":          {func(c *Config) { c.ShutdownGrace = -time.Second }, "--shutdown-grace must not be negative"},
		"mcp wait":       {func(c *Config) { c.MCPWait = -time.Second }, "--mcp-wait must not be negative"},
		"max wait":       {func(c *Config) { c.MaxWait = -time.Second }, "the longest wait must not be negative"},
		"result bytes 0": {func(c *Config) { c.MaxResultBytes = 0 }, "--max-result-bytes must be at least 1, got 0"},
		"retention":      {func(c *Config) { c.Retention = -time.Second }, "--retention must not be negative"},
		"bodies 0":       {func(c *Config) { c.MaxConcurrentBodies = 0 }, "--max-concurrent-bodies must be at least 1"},
		"held waits 0":   {func(c *Config) { c.MaxHeldWaits = 0 }, "--max-held-waits must be at least 1"},
		"body budget":    {func(c *Config) { c.MaxBodyBytesInFlight = MaxBodyBytes - 1 }, "--max-body-bytes-in-flight must be at least"},
		"instance host":  {func(c *Config) { c.InstanceHost = "a/b" }, "--instance-host: "},
		"chaos remote":   {func(c *Config) { c.Chaos, c.InsecureNoAuth, c.Addr = true, true, "0.0.0.0:8081" }, "--chaos makes the process exit on request, so it is only allowed on a loopback address"},
		"no auth remote": {func(c *Config) { c.Addr = ":8081" }, "without --auth-tokens anyone who can reach the port can read and replay every call"},
	}
	for name, tc := range cases {
		c := good()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want …%s…", name, err, tc.want)
		}
	}
	// Every refusal at once, one per line.
	err := (&Config{}).Validate()
	if err == nil || len(strings.Split(err.Error(), "\n")) != 7 {
		t.Errorf("zero Config: Validate = %v, want the seven refusals (addr, workers, lease, result bytes, bodies, held waits, body budget)", err)
	}
}
