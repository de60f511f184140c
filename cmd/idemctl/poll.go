package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(placeholder): replaced by the real command.
func newPollCmd(streams *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "poll",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return errors.New("poll: not implemented yet") },
	}
}
