package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(placeholder): replaced by the real command.
func newServeCmd(streams *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("serve: not implemented yet") },
	}
}
