// Command idemctl makes tool calls safe to retry: an HTTP service that records
// every call under its idempotency key, plus the client, chaos, bench and
// inspection tools around it. See README.md.
package main

import "os"

func main() {
	os.Exit(Main(os.Args[1:], defaultStreams()))
}
