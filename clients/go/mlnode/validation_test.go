package mlnode

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// fakeValidation answers ValidatePocArtifacts with the scripted events.
type fakeValidation struct {
	mlnodev1.UnimplementedValidationServiceServer
	events []*mlnodev1.ValidatePocArtifactsResponse
}

func (f *fakeValidation) ValidatePocArtifacts(_ *mlnodev1.ValidatePocArtifactsRequest, stream mlnodev1.ValidationService_ValidatePocArtifactsServer) error {
	for _, event := range f.events {
		if err := stream.Send(event); err != nil {
			return err
		}
	}
	return nil
}

func serveValidation(t *testing.T, validation *fakeValidation) *Client {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	mlnodev1.RegisterValidationServiceServer(server, validation)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	return NewClient(dial(t, listener.Addr().String()))
}

func progressEvent(checked int64) *mlnodev1.ValidatePocArtifactsResponse {
	return &mlnodev1.ValidatePocArtifactsResponse{Event: &mlnodev1.ValidatePocArtifactsResponse_Progress{
		Progress: &mlnodev1.PocValidationProgress{NoncesChecked: checked},
	}}
}

func TestValidatePocArtifactsReturnsTheSummaryAfterTheProgress(t *testing.T) {
	summary := &mlnodev1.PocValidationSummary{NTotal: 4, NMismatch: 1, MismatchNonces: []int64{3}, PValue: 0.34}
	client := serveValidation(t, &fakeValidation{events: []*mlnodev1.ValidatePocArtifactsResponse{
		progressEvent(2), progressEvent(4),
		{Event: &mlnodev1.ValidatePocArtifactsResponse_Summary{Summary: summary}},
	}})
	var checked []int64
	got, err := client.ValidatePocArtifacts(context.Background(), &mlnodev1.ValidatePocArtifactsRequest{}, func(p *mlnodev1.PocValidationProgress) error {
		checked = append(checked, p.GetNoncesChecked())
		return nil
	})
	if err != nil || got.GetNTotal() != 4 || got.GetMismatchNonces()[0] != 3 || len(checked) != 2 || checked[1] != 4 {
		t.Fatalf("summary %v, progress %v, error %v", got, checked, err)
	}
}

func TestValidatePocArtifactsWithoutASummaryIsAnError(t *testing.T) {
	client := serveValidation(t, &fakeValidation{events: []*mlnodev1.ValidatePocArtifactsResponse{progressEvent(2)}})
	summary, err := client.ValidatePocArtifacts(context.Background(), &mlnodev1.ValidatePocArtifactsRequest{}, nil)
	if err != errNoSummary || summary != nil {
		t.Fatalf("summary %v, error %v; want errNoSummary: a cut stream has no verdict", summary, err)
	}
}
