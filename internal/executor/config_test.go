package executor

import (
	"strings"
	"testing"
	"time"
)

// TestConfigValidate: each out-of-range value is refused with a message
// naming its flag, zeros included (New applies WithDefaults before it
// validates), and every bad value is reported at once.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Workers = -1 }, "--workers must be at least 1"},
		{func(c *Config) { c.Workers = 0 }, "--workers must be at least 1"},
		{func(c *Config) { c.Lease = -time.Second }, "--lease must be at least 1s"},
		{func(c *Config) { c.Lease = MinLease - time.Millisecond }, "--lease must be at least 1s"},
		{func(c *Config) { c.RecoverInterval = -1 }, "recover interval must not be negative"},
		{func(c *Config) { c.ShutdownGrace = -time.Second }, "--shutdown-grace must not be negative"},
		{func(c *Config) { c.MaxResultBytes = 0 }, "--max-result-bytes must be at least 1"},
		{func(c *Config) { c.InstanceHost = "a/b" }, "--instance-host"},
	} {
		c := Config{}.WithDefaults()
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error mentioning %q", c, err, tc.want)
		}
	}
	for _, ok := range []Config{{}, {Lease: MinLease}, {Workers: 1, InstanceHost: "node-a"}} {
		if err := ok.WithDefaults().Validate(); err != nil {
			t.Errorf("Validate(WithDefaults(%+v)) = %v, want nil", ok, err)
		}
	}
	// Every error at once, not only the first.
	err := Config{Workers: -1, Lease: -1, MaxResultBytes: -1}.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("three bad values: %v, want three errors", err)
	}
}

// TestConfigDefaults: the zero Config takes the documented defaults, and
// values that are set are kept.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	d := Config{}.WithDefaults()
	if d.Workers != 256 || d.Lease != 30*time.Second || d.RecoverInterval != 200*time.Millisecond ||
		d.ShutdownGrace != 15*time.Second || d.MaxResultBytes != 1<<20 || d.Exit == nil || d.Policies != nil {
		t.Errorf("defaults = %+v, want workers 256, lease 30s, interval 200ms, grace 15s, 1 MiB results, an exit, no policies", d)
	}
	set := Config{Workers: 3, Lease: 2 * time.Second, RecoverInterval: time.Second, ShutdownGrace: time.Minute, MaxResultBytes: 10}.WithDefaults()
	if set.Workers != 3 || set.Lease != 2*time.Second || set.RecoverInterval != time.Second ||
		set.ShutdownGrace != time.Minute || set.MaxResultBytes != 10 {
		t.Errorf("set values changed: %+v", set)
	}
}
