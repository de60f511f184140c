package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(placeholder): replaced by the real command.
func newCallCmd(streams *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "call",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("call: not implemented yet") },
	}
}
