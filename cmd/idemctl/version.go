package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// versionOptions are the flags of idemctl version (none yet).
type versionOptions struct{}

// Validate accepts everything: version has no flags.
func (o *versionOptions) Validate() error { return nil }

func newVersionCmd(streams *IOStreams) *cobra.Command {
	opts := &versionOptions{}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision idemctl was built from",
		Long: `Print the module version and the VCS revision (with its time, and "dirty"
when the tree had uncommitted changes) that idemctl was built from, as Go
recorded them in the binary. "idemctl --version" prints the same line.
See docs/cli.md, "version".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			return runtimeError(runVersion(cmd.Context(), opts, streams))
		},
	}
}

// runVersion prints the version line.
func runVersion(_ context.Context, _ *versionOptions, streams *IOStreams) error {
	_, err := fmt.Fprintln(streams.Out, buildVersion())
	return err
}

// buildVersion describes this binary from debug.ReadBuildInfo.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	return formatVersion(bi, ok)
}

// formatVersion renders build info as one line, e.g.
// "idemctl v1.2.0 (rev 3f2c1ab9d0e1, 2026-11-30T10:00:00Z, go1.26.0)" or
// "idemctl (devel) (rev 3f2c1ab9d0e1-dirty, ...)". Without build info (a
// binary built without module support) it says "unknown".
func formatVersion(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "idemctl unknown (no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, when string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	var details []string
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "-dirty"
		}
		details = append(details, "rev "+rev)
	} else {
		details = append(details, "rev unknown")
	}
	if when != "" {
		details = append(details, when)
	}
	if bi.GoVersion != "" {
		details = append(details, bi.GoVersion)
	}
	return fmt.Sprintf("idemctl %s (%s)", version, strings.Join(details, ", "))
}
