package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/server"
)

// tokenBytes is the randomness of a new token: 256 bits.
const tokenBytes = 32

// tokenPrefix marks idemctl tokens, so a secret scanner (or a person) can
// tell one when it leaks into a file or a log.
const tokenPrefix = "idem_"

func newTokenCmd(streams *IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage bearer tokens for serve --auth-tokens",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "new PRINCIPAL",
		Short: "Print a fresh random token for PRINCIPAL and the line to add to the --auth-tokens file",
		Long: `Print a fresh random bearer token (32 random bytes, URL-safe base64, prefixed
"idem_") on the first line of stdout, and on the second the line to append to
the serve --auth-tokens file: PRINCIPAL:SHA256HEX, the SHA-256 of the token,
so the file holds no secret. The token is shown once and stored nowhere; give
it to the client (call --token, or IDEMCTL_TOKEN). Send SIGHUP to a running
serve to make it re-read the file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			principal := args[0]
			if err := server.CheckPrincipal(principal); err != nil {
				return fmt.Errorf("PRINCIPAL: %w", err)
			}
			token, err := newToken()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(streams.Out, "%s\n%s:%s\n", token, principal, server.HashToken(token))
			return err
		},
	})
	return cmd
}

// newToken returns tokenPrefix + tokenBytes random bytes in URL-safe
// base64 without padding.
func newToken() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}
