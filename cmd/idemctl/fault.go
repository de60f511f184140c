package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(placeholder): replaced by the real command.
func newFaultCmd(streams *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "fault",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("fault: not implemented yet") },
	}
}
