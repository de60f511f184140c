package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams are where commands write: data to Out, diagnostics and progress
// to ErrOut. Each stream knows whether it is a terminal, so a command can
// draw a progress bar for a person and print plain lines for a log file.
// Tests pass buffers (and set the TTY fields to test either branch).
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// OutTTY and ErrTTY say whether Out and ErrOut are terminals.
	OutTTY bool
	ErrTTY bool
}

// defaultStreams are the process's standard streams.
func defaultStreams() *IOStreams {
	return &IOStreams{
		In:     os.Stdin,
		Out:    os.Stdout,
		ErrOut: os.Stderr,
		OutTTY: term.IsTerminal(int(os.Stdout.Fd())),
		ErrTTY: term.IsTerminal(int(os.Stderr.Fd())),
	}
}
