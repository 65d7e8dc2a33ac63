package mlnode

import (
	"context"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// During a PoC round inference is NOT_SERVING while the other services serve: each is read alone.
func TestServiceStatusIsPerService(t *testing.T) {
	address, health := serve(t, nil)
	health.SetServingStatus(InferenceService, healthpb.HealthCheckResponse_NOT_SERVING)
	health.SetServingStatus(ValidationService, healthpb.HealthCheckResponse_SERVING)
	conn := dial(t, address)
	for service, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"":                healthpb.HealthCheckResponse_SERVING,
		InferenceService:  healthpb.HealthCheckResponse_NOT_SERVING,
		ValidationService: healthpb.HealthCheckResponse_SERVING,
		PocService:        healthpb.HealthCheckResponse_SERVICE_UNKNOWN, // not registered here
	} {
		got, err := ServiceStatus(context.Background(), conn, service)
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", service, got, err, want)
		}
	}
}

func TestServiceNamesAreTheProtosServices(t *testing.T) {
	for name, file := range map[string]protoreflect.FileDescriptor{
		InferenceService:  mlnodev1.File_gonka_mlnode_v1_inference_proto,
		ValidationService: mlnodev1.File_gonka_mlnode_v1_validation_proto,
		PocService:        mlnodev1.File_gonka_mlnode_v1_poc_proto,
	} {
		short := protoreflect.FullName(name).Name()
		if service := file.Services().ByName(short); service == nil || service.FullName() != protoreflect.FullName(name) {
			t.Errorf("%s declares no service %s", file.Path(), name)
		}
	}
}
