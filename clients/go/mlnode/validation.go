package mlnode

import (
	"context"
	"errors"
	"io"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// ValidateInference sends items to be replayed and judged, and hands each verdict (or item error,
// tagged with the item's index) to handle as it completes, in completion order.
func (c *Client) ValidateInference(ctx context.Context, items []*mlnodev1.InferenceItem, handle func(*mlnodev1.ValidateInferenceResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Validation.ValidateInference(ctx, &mlnodev1.ValidateInferenceRequest{Items: items})
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

// errNoSummary: the server always ends ValidatePocArtifacts with a summary; a stream that closes
// without one was cut on the way, and its verdict is unknown.
var errNoSummary = errors.New("mlnode: ValidatePocArtifacts ended without its summary")

// ValidatePocArtifacts recomputes a prover's claims and returns the verdict. progress (nil: not
// wanted) sees each recomputed batch as it completes; ErrStop from it abandons the validation
// (nil summary, nil error).
func (c *Client) ValidatePocArtifacts(ctx context.Context, request *mlnodev1.ValidatePocArtifactsRequest, progress func(*mlnodev1.PocValidationProgress) error) (*mlnodev1.PocValidationSummary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Validation.ValidatePocArtifacts(ctx, request)
	if err != nil {
		return nil, err
	}
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			return nil, errNoSummary
		}
		if err != nil {
			return nil, err
		}
		if summary := response.GetSummary(); summary != nil {
			return summary, nil
		}
		if progress != nil {
			if err := progress(response.GetProgress()); err != nil {
				return nil, handled(err)
			}
		}
	}
}
