package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/term"

	"github.com/idemctl/idemctl/internal/exitcode"
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

// ExitError carries a specific exit status out of a command: fault, bench
// and inspect dupes exit exitcode.Failed when an invariant breaks, call when
// the call failed; runtime failures exit exitcode.Error (see runtimeError).
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

// runtimeError marks err, returned by a command's run function after its
// options were accepted, as a runtime failure (exitcode.Error): the database
// is unreachable, the port is taken. An *ExitError already carries its own
// status and passes through. Errors that reach Main unmarked come from
// cobra's parsing, Validate or the configuration: usage errors.
func runtimeError(err error) error {
	if err == nil {
		return nil
	}
	var exitErr *ExitError
	if errors.As(err, &exitErr) {
		return err
	}
	return &ExitError{Code: exitcode.Error, Err: err}
}

// envPrefix: every flag can come from IDEMCTL_<NAME>, '-' → '_'.
const envPrefix = "IDEMCTL"

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
		newVersionCmd(streams),
		newTokenCmd(streams),
		newCallsCmd(streams),
		newCancelCmd(streams),
		newMCPCmd(streams),
	)
	return root
}

// alwaysReadEnv are the IDEMCTL_* variables read on purpose that are not a
// flag's: the config file's path, the PostgreSQL URL the tests use, and the
// failpoints serve --chaos arms.
var alwaysReadEnv = map[string]bool{
	envPrefix + "_CONFIG":            true,
	envPrefix + "_TEST_POSTGRES_URL": true,
	envPrefix + "_FAILPOINTS":        true, // serve --chaos (docs/failpoints.md)
}

// envName is the environment variable that may set flag name.
func envName(flag string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// warnUnknownEnv writes a warning for each IDEMCTL_* variable in environ
// that neither names a flag of some command nor is in alwaysReadEnv. A
// misspelled variable (IDEMCTL_WORKER) would otherwise be ignored without a
// word, while the same typo in a config file is an error. It only warns: a
// variable meant for another command or another version must not fail this
// run.
func warnUnknownEnv(w io.Writer, root *cobra.Command, environ []string) {
	known := map[string]bool{}
	for name := range alwaysReadEnv {
		known[name] = true
	}
	for name := range allFlagNames(root) {
		// --help and --version are never read from the environment.
		if name != "help" && name != "version" {
			known[envName(name)] = true
		}
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, envPrefix+"_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	slices.Sort(unknown)
	for _, name := range unknown {
		fmt.Fprintf(w, "idemctl: warning: ignoring %s: no flag is named --%s (see docs/cli.md, \"Configuration\")\n",
			name, strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix+"_"), "_", "-")))
	}
}

// applyConfig fills every flag the user did not set on the command line from
// the environment (IDEMCTL_ADDR) or the config file, so the precedence is
// flag > env > file > default. A fresh viper per run keeps tests independent.
// In the file, a key may sit at the top level ("addr: ...") or under the
// top-level command's name ("serve: {addr: ...}", "inspect: {db: ...}" for
// every inspect subcommand); the command's section wins. Keys are the flags'
// long names. A key that no command knows is an error: a typo in a config
// file must not silently fall back to a default. An unknown IDEMCTL_*
// variable gets a warning on stderr.
func applyConfig(cmd *cobra.Command, configFile string) error {
	warnUnknownEnv(cmd.ErrOrStderr(), cmd.Root(), os.Environ())
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
	// A flag counts as given when it or one of its deprecated aliases is on
	// the command line. An alias is applied only while the flag it stands
	// for is still unset; the flag itself is applied whatever the alias
	// did. So in either visiting order --attempt-timeout and
	// IDEMCTL_ATTEMPT_TIMEOUT beat IDEMCTL_TIMEOUT, and --timeout beats
	// IDEMCTL_ATTEMPT_TIMEOUT.
	given := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			given[f.Name] = true
			if of := aliasOf(f); of != "" {
				given[of] = true
			}
		}
	})
	var errs []error
	apply := func(f *pflag.Flag) {
		if given[f.Name] || f.Name == "config" || f.Name == "help" {
			return
		}
		if of := aliasOf(f); of != "" && cmd.Flags().Lookup(of).Changed {
			return
		}
		var (
			val any
			// from names the source in an error, so the user knows what to fix.
			from string
		)
		env := envName(f.Name)
		if s, ok := os.LookupEnv(env); ok && s != "" { // empty counts as unset
			val, from = s, "environment variable "+env
		} else if v.IsSet(section + "." + f.Name) {
			val, from = v.Get(section+"."+f.Name), fmt.Sprintf("config %s, key %s.%s", configFile, section, f.Name)
		} else if v.InConfig(f.Name) {
			val, from = v.Get(f.Name), fmt.Sprintf("config %s, key %s", configFile, f.Name)
		}
		if val == nil {
			return
		}
		if err := setFlag(cmd.Flags(), f, val); err != nil {
			errs = append(errs, fmt.Errorf("%s (for --%s): %w", from, f.Name, err))
		}
	}
	cmd.Flags().VisitAll(apply)
	warnDeprecated(cmd.ErrOrStderr(), cmd.Flags())
	return errors.Join(errs...)
}

// aliasAnnotation marks a deprecated alias flag with the name of the flag it
// stands for.
const aliasAnnotation = "idemctl_alias_of"

// addDeprecatedAlias adds --alias to fs as a hidden, deprecated second name
// of the existing flag name: both set the same value. warnDeprecated prints
// the notice when the alias is used (command line, environment or config
// file). pflag's own MarkDeprecated is not used: cobra prints its notice to
// the data stream (stdout), where it would corrupt JSON output.
func addDeprecatedAlias(fs *pflag.FlagSet, name, alias string) {
	f := fs.Lookup(name)
	fs.Var(f.Value, alias, "deprecated: use --"+name)
	a := fs.Lookup(alias)
	a.DefValue = f.DefValue
	a.Annotations = map[string][]string{aliasAnnotation: {name}}
	a.Hidden = true
}

// warnDeprecated writes a notice to w for each deprecated alias in fs that
// was set, from any source.
func warnDeprecated(w io.Writer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if of := aliasOf(f); of != "" && f.Changed {
			fmt.Fprintf(w, "idemctl: warning: --%s (or %s) is deprecated, use --%s (or %s)\n",
				f.Name, envName(f.Name), of, envName(of))
		}
	})
}

// aliasOf is the flag f is a deprecated alias of, or "".
func aliasOf(f *pflag.Flag) string {
	if names := f.Annotations[aliasAnnotation]; len(names) == 1 {
		return names[0]
	}
	return ""
}

// allFlagNames is the set of flag names of c and all its subcommands.
func allFlagNames(c *cobra.Command) map[string]bool {
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
	all := allFlagNames(root)
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
			known := allFlagNames(sub)
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
