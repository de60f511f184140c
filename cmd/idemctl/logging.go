package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// addLogFlags defines --log-format and --log-level, the logging flags of
// every long-running command (serve, proxy), into format and level.
func addLogFlags(f *pflag.FlagSet, format, level *string) {
	f.StringVar(format, "log-format", "text", "log format: text or json (logs go to stderr)")
	f.StringVar(level, "log-level", "info", "log level: debug, info, warn or error")
}

// checkLogFlags validates the values of addLogFlags and returns the parsed
// level; each bad flag is one error.
func checkLogFlags(format, level string) (slog.Level, []error) {
	var errs []error
	if format != "text" && format != "json" {
		errs = append(errs, fmt.Errorf("--log-format must be text or json, got %q", format))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", level))
	}
	return lvl, errs
}

// newLogger is the logger the logging flags ask for, writing to w.
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
