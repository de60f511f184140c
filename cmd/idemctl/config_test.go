package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// probeRoot builds a root like newRootCmd's, with one subcommand whose flags
// mirror serve's kinds (string, int, duration, bool) and which records the
// values it ends up with, so each precedence tier can be asserted.
func probeRoot(t *testing.T, got *probeValues) *cobra.Command {
	t.Helper()
	var configFile string
	root := &cobra.Command{
		Use:           "idemctl",
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd, configFile)
		},
	}
	root.PersistentFlags().StringVar(&configFile, "config", "", "")
	probe := &cobra.Command{
		Use:  "probe",
		RunE: func(*cobra.Command, []string) error { return nil },
	}
	probe.Flags().StringVar(&got.addr, "addr", "127.0.0.1:8081", "")
	probe.Flags().IntVar(&got.workers, "workers", 8, "")
	probe.Flags().DurationVar(&got.lease, "lease", 30*time.Second, "")
	probe.Flags().BoolVar(&got.chaos, "chaos", false, "")
	probe.Flags().StringVar(&got.logFormat, "log-format", "text", "")
	root.AddCommand(probe)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	return root
}

type probeValues struct {
	addr      string
	workers   int
	lease     time.Duration
	chaos     bool
	logFormat string
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idemctl.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runProbe(t *testing.T, args ...string) probeValues {
	t.Helper()
	var got probeValues
	root := probeRoot(t, &got)
	root.SetArgs(append([]string{"probe"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatalf("execute %v: %v", args, err)
	}
	return got
}

// clearEnv unsets the IDEMCTL_ variables a developer's shell might carry.
func clearEnv(t *testing.T) {
	for _, name := range []string{"ADDR", "WORKERS", "LEASE", "CHAOS", "LOG_FORMAT", "CONFIG"} {
		t.Setenv("IDEMCTL_"+name, "")
		os.Unsetenv("IDEMCTL_" + name)
	}
}

func TestConfigDefaultTier(t *testing.T) {
	clearEnv(t)
	got := runProbe(t)
	if got.addr != "127.0.0.1:8081" || got.workers != 8 || got.lease != 30*time.Second || got.chaos {
		t.Fatalf("defaults not kept: %+v", got)
	}
}

func TestConfigFileTier(t *testing.T) {
	clearEnv(t)
	cfg := writeConfig(t, "addr: 127.0.0.1:9001\nworkers: 3\nlease: 5s\nchaos: true\nlog-format: json\n")
	got := runProbe(t, "--config", cfg)
	want := probeValues{addr: "127.0.0.1:9001", workers: 3, lease: 5 * time.Second, chaos: true, logFormat: "json"}
	if got != want {
		t.Fatalf("file tier: got %+v, want %+v", got, want)
	}
}

func TestConfigFileCommandSectionWins(t *testing.T) {
	clearEnv(t)
	cfg := writeConfig(t, "workers: 3\nprobe:\n  workers: 5\n")
	if got := runProbe(t, "--config", cfg); got.workers != 5 {
		t.Fatalf("section value not preferred: workers=%d, want 5", got.workers)
	}
}

func TestConfigEnvTierBeatsFile(t *testing.T) {
	clearEnv(t)
	cfg := writeConfig(t, "addr: 127.0.0.1:9001\nworkers: 3\n")
	t.Setenv("IDEMCTL_ADDR", "127.0.0.1:9002")
	t.Setenv("IDEMCTL_LOG_FORMAT", "json") // '-' in the flag name becomes '_'
	got := runProbe(t, "--config", cfg)
	if got.addr != "127.0.0.1:9002" {
		t.Fatalf("env should beat file: addr=%s", got.addr)
	}
	if got.workers != 3 {
		t.Fatalf("file value lost where env is silent: workers=%d", got.workers)
	}
	if got.logFormat != "json" {
		t.Fatalf("IDEMCTL_LOG_FORMAT not applied: %s", got.logFormat)
	}
}

func TestConfigFlagTierBeatsEnvAndFile(t *testing.T) {
	clearEnv(t)
	cfg := writeConfig(t, "addr: 127.0.0.1:9001\n")
	t.Setenv("IDEMCTL_ADDR", "127.0.0.1:9002")
	got := runProbe(t, "--config", cfg, "--addr", "127.0.0.1:9003")
	if got.addr != "127.0.0.1:9003" {
		t.Fatalf("flag should beat env and file: addr=%s", got.addr)
	}
}

func TestConfigFileFromEnv(t *testing.T) {
	clearEnv(t)
	cfg := writeConfig(t, "workers: 4\n")
	t.Setenv("IDEMCTL_CONFIG", cfg)
	if got := runProbe(t); got.workers != 4 {
		t.Fatalf("IDEMCTL_CONFIG not read: workers=%d", got.workers)
	}
}

func TestConfigBadValueIsAnError(t *testing.T) {
	clearEnv(t)
	t.Setenv("IDEMCTL_WORKERS", "many")
	var got probeValues
	root := probeRoot(t, &got)
	root.SetArgs([]string{"probe"})
	if err := root.Execute(); err == nil {
		t.Fatal("IDEMCTL_WORKERS=many accepted")
	}
}

func TestConfigMissingFileIsAnError(t *testing.T) {
	clearEnv(t)
	var got probeValues
	root := probeRoot(t, &got)
	root.SetArgs([]string{"probe", "--config", filepath.Join(t.TempDir(), "absent.yaml")})
	if err := root.Execute(); err == nil {
		t.Fatal("an explicitly named missing config file was silently ignored")
	}
}

func TestConfigSectionAppliesToSubcommands(t *testing.T) {
	clearEnv(t)
	var got probeValues
	root := probeRoot(t, &got)
	var db string
	group := &cobra.Command{Use: "group"}
	leaf := &cobra.Command{Use: "leaf", RunE: func(*cobra.Command, []string) error { return nil }}
	leaf.Flags().StringVar(&db, "db", "idem.db", "")
	group.AddCommand(leaf)
	root.AddCommand(group)
	cfg := writeConfig(t, "group:\n  db: /tmp/x.db\n")
	root.SetArgs([]string{"--config", cfg, "group", "leaf"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if db != "/tmp/x.db" {
		t.Fatalf("a section named after the top-level command must reach its subcommands: db=%q", db)
	}
}

func TestConfigUnknownKeysAreErrors(t *testing.T) {
	for name, body := range map[string]string{
		"top level":  "adr: 127.0.0.1:1\n",
		"in section": "probe:\n  wrkers: 3\n",
	} {
		t.Run(name, func(t *testing.T) {
			clearEnv(t)
			var got probeValues
			root := probeRoot(t, &got)
			root.SetArgs([]string{"probe", "--config", writeConfig(t, body)})
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), "unknown key") {
				t.Fatalf("typo in config accepted: err=%v", err)
			}
		})
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	clearEnv(t)
	var out bytes.Buffer
	root := newRootCmd(&IOStreams{Out: &out, ErrOut: &out})
	// --help runs no command, so check the keys directly against the real tree.
	v := viper.New()
	v.SetConfigFile(filepath.Join("..", "..", "configs", "idemctl.yaml"))
	if err := v.ReadInConfig(); err != nil {
		t.Fatal(err)
	}
	if err := checkConfigKeys(root, v); err != nil {
		t.Fatalf("configs/idemctl.yaml has keys no command reads: %v", err)
	}
}

// TestExampleConfigShowsDefaults keeps the sample config honest: every value
// it sets is the built-in default of that flag, so a reader who copies it
// gets what the docs describe (a changed default must change the sample too).
func TestExampleConfigShowsDefaults(t *testing.T) {
	clearEnv(t)
	var out bytes.Buffer
	root := newRootCmd(&IOStreams{Out: &out, ErrOut: &out})
	v := viper.New()
	v.SetConfigFile(filepath.Join("..", "..", "configs", "idemctl.yaml"))
	if err := v.ReadInConfig(); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for section, value := range v.AllSettings() {
		keys, ok := value.(map[string]any)
		if !ok {
			t.Fatalf("top-level key %q: the sample sets keys per command only", section)
		}
		cmd, _, err := root.Find([]string{section})
		if err != nil || cmd == root {
			t.Fatalf("section %q names no command", section)
		}
		for key, val := range keys {
			f := cmd.Flags().Lookup(key)
			if f == nil {
				f = cmd.PersistentFlags().Lookup(key)
			}
			if f == nil {
				f = cmd.InheritedFlags().Lookup(key)
			}
			if f == nil {
				t.Fatalf("%s.%s names no flag", section, key)
			}
			got := fmt.Sprint(val)
			if d, err := time.ParseDuration(got); err == nil && f.Value.Type() == "duration" {
				got = d.String()
			}
			if got != f.DefValue {
				t.Errorf("configs/idemctl.yaml %s.%s = %s, but the default is %s", section, key, got, f.DefValue)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d keys", checked)
	}
}
