package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(placeholder): replaced by the real command.
func newInspectCmd(streams *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("inspect: not implemented yet") },
	}
}
