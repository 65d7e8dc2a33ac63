package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gonka-ai/mlnode-grpc/clients/go/mlnode"
)

// runHealth prints the grpc.health.v1 status of each service named (the server as a whole when
// none is), one "SERVICE STATUS" line each; it fails unless all of them are SERVING.
func runHealth(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("health", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "usage: mlnode-example health [flags] [SERVICE...]   (e.g. %s)\n", mlnode.InferenceService)
		flags.PrintDefaults()
	}
	connection := addConnectionFlags(flags)
	if err := parse(flags, args, true); err != nil {
		return err
	}
	services := flags.Args()
	if len(services) == 0 {
		services = []string{""}
	}
	conn, err := connection.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	notServing := 0
	for _, service := range services {
		status, err := mlnode.ServiceStatus(ctx, conn, service)
		if err != nil {
			return errors.New(describe(mlnode.DecodeError(err)))
		}
		name := service
		if name == "" {
			name = "(server)"
		}
		fmt.Println(name, status)
		if status != healthpb.HealthCheckResponse_SERVING {
			notServing++
		}
	}
	if notServing > 0 {
		return fmt.Errorf("%d of %d services not SERVING", notServing, len(services))
	}
	return nil
}
