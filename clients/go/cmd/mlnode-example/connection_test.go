package main

import (
	"context"
	"flag"
	"net"
	"os"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// The example reads the bearer token from the variable the server reads its own from, trimmed as
// the server trims it.
func TestTheTokenComesFromTheServersVariable(t *testing.T) {
	if tokenVariable != "MLNODE_AUTH_TOKEN" {
		t.Fatalf("token variable %s; the server reads MLNODE_AUTH_TOKEN (server/options.py AUTH_TOKEN_ENV)", tokenVariable)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan []string, 1)
	server := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, request interface{}, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		sent <- md.Get("authorization")
		return handler(ctx, request)
	}))
	healthpb.RegisterHealthServer(server, health.NewServer())
	go server.Serve(listener)
	defer server.Stop()

	previous, had := os.LookupEnv(tokenVariable)
	os.Setenv(tokenVariable, " s3cret-token\n")
	defer func() {
		if had {
			os.Setenv(tokenVariable, previous)
		} else {
			os.Unsetenv(tokenVariable)
		}
	}()
	flags := flag.NewFlagSet("test", flag.ContinueOnError)
	connection := addConnectionFlags(flags)
	if err := flags.Parse([]string{"--target", listener.Addr().String(), "--token-without-tls"}); err != nil {
		t.Fatal(err)
	}
	conn, err := connection.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := <-sent; len(got) != 1 || got[0] != "Bearer s3cret-token" {
		t.Fatalf("authorization %q; want [\"Bearer s3cret-token\"]", got)
	}
}
