package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// IOStreams are where commands write: data to Out, diagnostics and progress
// to ErrOut. Tests pass buffers.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

func defaultStreams() *IOStreams {
	return &IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
}

// ExitError carries a specific exit status out of a command: fault, bench
// and inspect dupes exit 1 when an invariant breaks, call when the call failed.
type ExitError struct {
	Code int
	Err  error // may be nil when the command already printed its verdict
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// envPrefix: every flag can come from IDEMCTL_<NAME>, '-' → '_'.
const envPrefix = "IDEMCTL"

// Main runs idemctl with args and returns the process exit status. Errors
// reach the user once, here.
func Main(args []string, streams *IOStreams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(streams)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		if exitErr.Err != nil {
			fmt.Fprintln(streams.ErrOut, "idemctl:", exitErr.Err)
		}
		return exitErr.Code
	}
	fmt.Fprintln(streams.ErrOut, "idemctl:", err)
	return 2
}

func newRootCmd(streams *IOStreams) *cobra.Command {
	var configFile string
	root := &cobra.Command{
		Use:           "idemctl",
		Short:         "Idempotent tool-call backend: retries, timeouts and crashes never duplicate an effect",
		SilenceErrors: true, // Main prints the error once
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd, configFile)
		},
	}
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
		newBenchCmd(streams),
		newInspectCmd(streams),
		newTokenCmd(streams),
		newCallsCmd(streams),
		newCancelCmd(streams),
	)
	return root
}

// applyConfig fills every flag the user did not set on the command line from
// the environment (IDEMCTL_ADDR) or the config file, so the precedence is
// flag > env > file > default. A fresh viper per run keeps tests independent.
// In the file, a key may sit at the top level ("addr: ...") or under the
// top-level command's name ("serve: {addr: ...}", "inspect: {db: ...}" for
// every inspect subcommand); the command's section wins. Keys are the flags'
// long names. A key that no command knows is an error: a typo in a config
// file must not silently fall back to a default.
func applyConfig(cmd *cobra.Command, configFile string) error {
	// viper reads the file (any format it knows); the environment is looked
	// up per flag below so that an env value always beats the file's.
	v := viper.New()
	if configFile == "" {
		configFile = os.Getenv(envPrefix + "_CONFIG")
	}
	if configFile != "" {
		v.SetConfigFile(configFile)
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("reading config %s: %w", configFile, err)
		}
		if err := checkConfigKeys(cmd.Root(), v); err != nil {
			return fmt.Errorf("config %s: %w", configFile, err)
		}
	}
	section := topLevelName(cmd)
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		var val any
		envName := envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if s, ok := os.LookupEnv(envName); ok && s != "" { // empty counts as unset
			val = s
		} else if v.IsSet(section + "." + f.Name) {
			val = v.Get(section + "." + f.Name)
		} else if v.InConfig(f.Name) {
			val = v.Get(f.Name)
		}
		if val == nil {
			return
		}
		if err := setFlag(cmd.Flags(), f, val); err != nil {
			errs = append(errs, fmt.Errorf("config value for --%s: %w", f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// topLevelName is the name of cmd's ancestor just below the root ("inspect"
// for "idemctl inspect stats"): the config file's section for it.
func topLevelName(cmd *cobra.Command) string {
	for cmd.HasParent() && cmd.Parent().HasParent() {
		cmd = cmd.Parent()
	}
	return cmd.Name()
}

// checkConfigKeys refuses keys that no command would read: a top-level key
// must be a top-level command's section or some command's flag; a key in a
// section must be a flag of that command or of one of its subcommands.
func checkConfigKeys(root *cobra.Command, v *viper.Viper) error {
	flagsOf := func(c *cobra.Command) map[string]bool {
		names := map[string]bool{}
		var walk func(*cobra.Command)
		walk = func(c *cobra.Command) {
			c.Flags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
			c.PersistentFlags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		walk(c)
		return names
	}
	all := flagsOf(root)
	sections := map[string]*cobra.Command{}
	for _, c := range root.Commands() {
		sections[c.Name()] = c
	}
	var errs []error
	for key, val := range v.AllSettings() {
		sub, isSection := sections[key]
		nested, isMap := val.(map[string]any)
		switch {
		case isSection && isMap:
			known := flagsOf(sub)
			for k := range nested {
				if !known[k] {
					errs = append(errs, fmt.Errorf("unknown key %q in section %q (keys are %s's flag names)", k, key, key))
				}
			}
		case !all[key]:
			errs = append(errs, fmt.Errorf("unknown key %q (keys are flag names, or a command name as a section)", key))
		}
	}
	return errors.Join(errs...)
}

// setFlag sets a flag from a config or env value; lists from a config file
// arrive as []any and are set element by element.
func setFlag(fs *pflag.FlagSet, f *pflag.Flag, val any) error {
	if list, ok := val.([]any); ok {
		for _, item := range list {
			if err := fs.Set(f.Name, fmt.Sprint(item)); err != nil {
				return err
			}
		}
		return nil
	}
	return fs.Set(f.Name, fmt.Sprint(val))
}
