package server

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// RunFunc is a binary's whole life: parse args, start, serve until ctx ends.
type RunFunc func(ctx context.Context, args []string, stderr io.Writer) error

// Main runs a binary: its Go memory limit follows the container's
// (SetMemoryLimit), SIGINT and SIGTERM cancel run's context (a graceful
// shutdown), and an error ends the process with status 1 after printing it
// under the binary's name.
func Main(name string, run RunFunc) {
	if _, _, err := SetMemoryLimit(); err != nil {
		fmt.Fprintln(os.Stderr, name+": no Go memory limit:", err) // runs on, as Go does by default
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Flags is what a binary's configuration does with its flags.
type Flags interface {
	RegisterFlags(fs *flag.FlagSet)
	Validate() error
}

// Parse registers cfg's flags on a new flag set named name, parses args with
// the environment overrides of ParseFlags, and validates the result. Usage
// and errors go to stderr.
func Parse(name string, cfg Flags, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	return cfg.Validate()
}
