package mlnode

import (
	"context"
	"io"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// Generate streams request's outputs to handle, one response message at a time, until the server
// ends the stream (nil once every output has finished) or handle returns an error (ErrStop: nil).
func (c *Client) Generate(ctx context.Context, request *mlnodev1.GenerateRequest, handle func(*mlnodev1.GenerateResponse) error) error {
	// Cancelling on return frees the engine request when handle stops early.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Inference.Generate(ctx, request)
	if err != nil {
		return err
	}
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := handle(response); err != nil {
			return handled(err)
		}
	}
}

// Abort ends the active Generate stream requestID (NOT_FOUND when there is none). A control RPC:
// with a server token, the connection needs WithBearerToken.
func (c *Client) Abort(ctx context.Context, requestID string) error {
	_, err := c.Inference.Abort(ctx, &mlnodev1.AbortRequest{RequestId: requestID})
	return err
}

// GetModelInfo returns the served model's facts and the server's input bounds.
func (c *Client) GetModelInfo(ctx context.Context) (*mlnodev1.GetModelInfoResponse, error) {
	return c.Inference.GetModelInfo(ctx, &mlnodev1.GetModelInfoRequest{})
}

// GetServerStatus returns the server's live state; includeEngineProcesses also asks every engine
// process for its report (a control RPC then).
func (c *Client) GetServerStatus(ctx context.Context, includeEngineProcesses bool) (*mlnodev1.GetServerStatusResponse, error) {
	return c.Inference.GetServerStatus(ctx, &mlnodev1.GetServerStatusRequest{IncludeEngineProcesses: includeEngineProcesses})
}
