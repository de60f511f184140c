package netutil

import (
	"strings"
	"testing"
)

// TestCheckLoopback: loopback IPs and localhost (any case) pass; every
// interface, other addresses and names, and a missing port are refused,
// each with a message that says why.
func TestCheckLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "LocalHost:80", "[::1]:0", "127.5.6.7:80"} {
		if err := CheckLoopback(addr); err != nil {
			t.Errorf("CheckLoopback(%s): %v", addr, err)
		}
	}
	for addr, want := range map[string]string{
		":8081":             "listens on every interface",
		"0.0.0.0:0":         "is not loopback",
		"[::]:0":            "is not loopback",
		"192.0.2.1:0":       "is not loopback",
		"example.invalid:0": "is not loopback",
		"127.0.0.1":         "missing port",
	} {
		if err := CheckLoopback(addr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckLoopback(%s) = %v, want an error saying %q", addr, err, want)
		}
	}
}
