package main

import "github.com/spf13/pflag"

// defaultBase is the server the client commands talk to by default: serve's
// default address.
const defaultBase = "http://127.0.0.1:8081"

// addServerFlags adds --base and --token, the way every client command
// names the server it talks to (call, poll, calls, cancel, mcp).
func addServerFlags(f *pflag.FlagSet, base, token *string) {
	f.StringVar(base, "base", defaultBase, "server base URL")
	f.StringVar(token, "token", "", "bearer token for a server run with --auth-tokens (better: IDEMCTL_TOKEN, which no process listing shows)")
}
