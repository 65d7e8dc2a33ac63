// Command mlnode-example talks to a gonka ML node over gRPC:
//
//	mlnode-example chat --prompt "Why is the sky blue?" --max-tokens 64
//	mlnode-example chat --message system:"Be brief." --message user:Hi --seed 7 --temperature 0.8 --top-logprobs 5 --json
//	mlnode-example health gonka.mlnode.v1.InferenceService
//	mlnode-example round start --block-hash H --public-key K --seq-len 1024
//	mlnode-example subscribe --json --max-batches 10
//	mlnode-example round stop
//
// Exit status: 0 on success, 1 when a call fails (or a service is not SERVING), 2 for bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// A subcommand parses its own flags from args and runs.
type subcommand func(ctx context.Context, args []string) error

var subcommands = map[string]subcommand{
	"chat":      runChat,
	"health":    runHealth,
	"round":     runRound,
	"subscribe": runSubscribe,
}

// errUsage marks a bad command line (exit status 2); the flag package has printed why.
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) < 2 || subcommands[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: mlnode-example <%s> [flags] (-h for a subcommand's flags)\n", names())
		os.Exit(2)
	}
	// Ctrl-C cancels the call: the server frees the request at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := subcommands[os.Args[1]](ctx, os.Args[2:])
	switch {
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "mlnode-example:", err)
		os.Exit(1)
	}
}

func names() string {
	var list []string
	for name := range subcommands {
		list = append(list, name)
	}
	sort.Strings(list)
	return strings.Join(list, "|")
}

// parse parses a subcommand's flags: a bad flag or a stray argument is errUsage.
func parse(flags *flag.FlagSet, args []string, positional bool) error {
	flags.SetOutput(os.Stderr)
	if err := flags.Parse(args); err != nil {
		return errUsage
	}
	if !positional && flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected argument %q\n", flags.Name(), flags.Arg(0))
		return errUsage
	}
	return nil
}
