package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"google.golang.org/grpc"

	"github.com/gonka-ai/mlnode-grpc/clients/go/mlnode"
)

// connectionFlags are every subcommand's flags for reaching the server.
type connectionFlags struct {
	target          string
	useTLS          bool
	tls             mlnode.TLSFiles
	tokenWithoutTLS bool
}

// tokenVariable holds the bearer token: an environment variable, not a flag, which anyone could
// read in the process list. The server reads its own token from the same variable, so one
// environment serves both.
const tokenVariable = "MLNODE_AUTH_TOKEN"

func addConnectionFlags(flags *flag.FlagSet) *connectionFlags {
	c := &connectionFlags{}
	flags.StringVar(&c.target, "target", "127.0.0.1:50051", "server address")
	flags.BoolVar(&c.useTLS, "tls", false, "connect over TLS (implied by the other TLS flags; system roots without --ca-file)")
	flags.StringVar(&c.tls.CAFile, "ca-file", "", "PEM roots that verify the server's certificate")
	flags.StringVar(&c.tls.CertFile, "cert-file", "", "client certificate (PEM) for mutual TLS")
	flags.StringVar(&c.tls.KeyFile, "key-file", "", "client key (PEM) for mutual TLS")
	flags.StringVar(&c.tls.ServerName, "server-name", "", "name the server's certificate must carry (default: the target's host)")
	flags.BoolVar(&c.tokenWithoutTLS, "token-without-tls", false, "send $"+tokenVariable+" over plaintext too")
	return c
}

func (c *connectionFlags) dial(ctx context.Context) (*grpc.ClientConn, error) {
	var options []mlnode.Option
	if c.useTLS || c.tls != (mlnode.TLSFiles{}) {
		options = append(options, mlnode.WithTLS(c.tls))
	}
	// Trimmed as the server trims its own copy, so that both read the same token from one value.
	if token := strings.TrimSpace(os.Getenv(tokenVariable)); token != "" {
		options = append(options, mlnode.WithBearerToken(token))
		if c.tokenWithoutTLS {
			options = append(options, mlnode.AllowTokenWithoutTLS())
		}
	}
	return mlnode.Dial(ctx, c.target, options...)
}
