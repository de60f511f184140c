package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(placeholder): replaced by the real command.
func newProxyCmd(streams *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "proxy",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("proxy: not implemented yet") },
	}
}
