package mlnode

import (
	"errors"

	"google.golang.org/grpc"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// Client holds the stubs of the server's three services on one connection, with a thin helper per
// RPC. The helpers return the RPC's own error unchanged (read it with DecodeError) and retry
// nothing, except SubscribeArtifacts, which resumes a dropped subscription (see there). The stubs
// stay exported for what the helpers do not cover (call options, a hand-driven stream).
type Client struct {
	Inference  mlnodev1.InferenceServiceClient
	Validation mlnodev1.ValidationServiceClient
	Poc        mlnodev1.PocServiceClient
}

// NewClient wraps a connection from Dial.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{
		Inference:  mlnodev1.NewInferenceServiceClient(conn),
		Validation: mlnodev1.NewValidationServiceClient(conn),
		Poc:        mlnodev1.NewPocServiceClient(conn),
	}
}

// ErrStop, returned by a stream helper's handler, ends the stream early: the helper cancels the
// call (the server frees its work at once) and returns nil.
var ErrStop = errors.New("mlnode: stop the stream")

// handled turns a handler's error into the helper's result: ErrStop is a success.
func handled(err error) error {
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}
