package mlnode

import (
	"context"
	"io"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// StartRound starts a mining round and returns its status at once. While it runs, inference on
// the server is refused: stop it with StopRound (ALREADY_EXISTS, ROUND_ALREADY_RUNNING, names the
// running round in its metadata).
func (c *Client) StartRound(ctx context.Context, request *mlnodev1.StartRoundRequest) (*mlnodev1.RoundStatus, error) {
	response, err := c.Poc.StartRound(ctx, request)
	return response.GetStatus(), err
}

// StopRound stops round roundID ("": the running round) and returns once inference is open again.
func (c *Client) StopRound(ctx context.Context, roundID string) (*mlnodev1.RoundStatus, error) {
	response, err := c.Poc.StopRound(ctx, &mlnodev1.StopRoundRequest{RoundId: roundID})
	return response.GetStatus(), err
}

// GetRoundStatus returns round roundID's status ("": the running round, else the most recent one).
func (c *Client) GetRoundStatus(ctx context.Context, roundID string) (*mlnodev1.RoundStatus, error) {
	response, err := c.Poc.GetRoundStatus(ctx, &mlnodev1.GetRoundStatusRequest{RoundId: roundID})
	return response.GetStatus(), err
}

// ComputeArtifacts computes the artifacts of request's nonces and hands them to handle batch by
// batch (DecodeArtifacts reads one), until the last batch (nil) or handle's error (ErrStop: nil).
func (c *Client) ComputeArtifacts(ctx context.Context, request *mlnodev1.ComputeArtifactsRequest, handle func(*mlnodev1.ArtifactBatch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Poc.ComputeArtifacts(ctx, request)
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
		if err := handle(response.GetBatch()); err != nil {
			return handled(err)
		}
	}
}
