package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// envPrefix: every flag can come from IDEMCTL_<NAME>, '-' → '_'.
const envPrefix = "IDEMCTL"

// alwaysReadEnv are the IDEMCTL_* variables read on purpose that are not a
// flag's: the config file's path, the PostgreSQL URL and the MCP reference
// server the tests use, and the failpoints serve --chaos arms.
var alwaysReadEnv = map[string]bool{
	envPrefix + "_CONFIG":              true,
	envPrefix + "_TEST_POSTGRES_URL":   true,
	envPrefix + "_TEST_MCP_EVERYTHING": true,
	envPrefix + "_FAILPOINTS":          true, // serve --chaos (docs/failpoints.md)
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
