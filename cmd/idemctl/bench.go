package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(placeholder): replaced by the real command.
func newBenchCmd(streams *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("bench: not implemented yet") },
	}
}
