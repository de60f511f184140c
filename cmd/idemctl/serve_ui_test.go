package main

import (
	"io"
	"strings"
	"testing"
)

// TestServeUIDefault: the console is on by default with tokens or on a
// loopback address, off on a non-loopback address without tokens
// (--insecure-no-auth), and --ui given on the command line wins both ways.
func TestServeUIDefault(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--addr", "127.0.0.1:0"}, true},
		{[]string{"--addr", "0.0.0.0:0", "--insecure-no-auth"}, false},
		{[]string{"--addr", "0.0.0.0:0", "--auth-tokens", "tokens.txt"}, true},
		{[]string{"--addr", "0.0.0.0:0", "--insecure-no-auth", "--ui"}, true},
		{[]string{"--ui=false"}, false},
		{[]string{"--addr", "0.0.0.0:0", "--auth-tokens", "tokens.txt", "--ui=false"}, false},
	}
	for _, tc := range cases {
		cmd := newServeCmd(&IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard})
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		o := serveOptions{}
		o.Addr, _ = cmd.Flags().GetString("addr")
		o.AuthTokens, _ = cmd.Flags().GetString("auth-tokens")
		o.UI, _ = cmd.Flags().GetBool("ui")
		o.uiSet = cmd.Flags().Changed("ui")
		if got := o.uiEnabled(); got != tc.want {
			t.Errorf("serve %v: console on = %v, want %v", tc.args, got, tc.want)
		}
	}
}
