package mlnode

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The server's services as grpc.health.v1 names them; each has its own status ("" is the server
// as a whole). During a PoC round InferenceService is NOT_SERVING while PocService serves.
const (
	InferenceService  = "gonka.mlnode.v1.InferenceService"
	ValidationService = "gonka.mlnode.v1.ValidationService"
	PocService        = "gonka.mlnode.v1.PocService"
)

// ServiceStatus asks the server's grpc.health.v1.Health/Check for one service's status. A service
// the server does not know is SERVICE_UNKNOWN (the Check RPC's NOT_FOUND), not an error.
func ServiceStatus(ctx context.Context, conn grpc.ClientConnInterface, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	response, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if status.Code(err) == codes.NotFound {
		return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, nil
	}
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return response.GetStatus(), nil
}
