// Package netutil holds the one rule for what counts as a loopback listen
// address. serve (--chaos, no auth, --pprof, the console's default), the
// chaos proxy and the demo downstream all refuse or allow an address by
// it, so they agree on ":8081" and "localhost:8081".
package netutil

import (
	"fmt"
	"net"
	"strings"
)

// CheckLoopback accepts host:port where host is localhost or an IP in
// 127.0.0.0/8 or ::1. An empty host means every interface and is refused;
// so is a name other than localhost, which could resolve anywhere.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	if host == "" {
		return fmt.Errorf("address %q listens on every interface", addr)
	}
	return fmt.Errorf("address %q is not loopback", addr)
}
