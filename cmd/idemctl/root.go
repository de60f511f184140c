package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// Main runs idemctl with args until it ends or SIGINT/SIGTERM cancels it,
// and returns the process exit status.
func Main(args []string, streams *IOStreams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return execute(ctx, args, streams)
}

// execute runs idemctl with args under ctx and returns the exit status.
// Errors reach the user once, here, and are mapped to exit statuses here
// only: an *ExitError carries its own, anything else is a usage error
// (cobra's parsing, Validate, the configuration).
func execute(ctx context.Context, args []string, streams *IOStreams) int {
	root := newRootCmd(streams)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitcode.OK
	}
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		if exitErr.Err != nil {
			fmt.Fprintln(streams.ErrOut, "idemctl:", exitErr.Err)
		}
		return exitErr.Code
	}
	fmt.Fprintln(streams.ErrOut, "idemctl:", err)
	return exitcode.Usage
}

func newRootCmd(streams *IOStreams) *cobra.Command {
	var configFile string
	root := &cobra.Command{
		Use:   "idemctl",
		Short: "Idempotent tool-call backend: retries, timeouts and crashes never duplicate an effect",
		Long: `idemctl makes tool calls safe to retry: "idemctl serve" records every call
under its idempotency key and runs it once; call, poll, proxy, fault, soak, bench
and inspect are the client, chaos, load and evidence tools around it.

Every flag can also come from IDEMCTL_<FLAG> (upper case, '-' → '_') or a
config file (--config); see docs/cli.md, "Configuration". Exit statuses:
0 ok, 1 a negative outcome (failed call, broken check), 2 usage error,
3 chaos crash (serve), 4 runtime error (database unreadable, port taken);
see docs/cli.md, "Exit codes".`,
		Version:       buildVersion(),
		SilenceErrors: true, // Main prints the error once
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd, configFile)
		},
	}
	// --version prints the same line as `idemctl version`.
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.PersistentFlags().StringVar(&configFile, "config", "",
		"config file (YAML, TOML or JSON); keys are flag names, optionally under a section named after the command")
	root.AddCommand(
		newServeCmd(streams),
		newCallCmd(streams),
		newPollCmd(streams),
		newProxyCmd(streams),
		newFaultCmd(streams),
		newSoakCmd(streams),
		newBenchCmd(streams),
		newInspectCmd(streams),
		newDemoDownstreamCmd(streams),
		newDemoMCPCmd(streams),
		newVersionCmd(streams),
		newTokenCmd(streams),
		newCallsCmd(streams),
		newCancelCmd(streams),
		newRedriveCmd(streams),
		newReconcileCmd(streams),
		newResolveCmd(streams),
		newMCPCmd(streams),
	)
	return root
}
