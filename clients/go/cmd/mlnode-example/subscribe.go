package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
	"github.com/gonka-ai/mlnode-grpc/clients/go/mlnode"
)

// artifactLine is one artifact with --json: the network's claim (nonce, vector_b64), which
// `mlnode-client validate-poc` reads back, and where it came from.
type artifactLine struct {
	RoundID   string `json:"round_id"`
	Sequence  int64  `json:"sequence"`
	Nonce     int64  `json:"nonce"`
	VectorB64 string `json:"vector_b64"`
}

// runSubscribe prints a round's artifacts as they are produced, one line each ("NONCE VECTOR_B64",
// or a JSON object with --json), until the round ends or --max-batches batches were printed. Only
// artifacts go to stdout (lost ranges, reconnects, the end and a failure go to stderr), so that
// --json output is a claims file as it stands. A dropped connection is resumed after the last batch received.
// Exit status 0 when the round was stopped (or enough batches came), 1 when it failed or the
// server shut down.
func runSubscribe(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("subscribe", flag.ContinueOnError)
	connection := addConnectionFlags(flags)
	roundID := flags.String("round-id", "", "the round (default: the running round, or else the most recent one)")
	after := flags.Int64("after-sequence", 0, "print the batches after this one (0: from the first still buffered)")
	maxBatches := flags.Int("max-batches", 0, "stop after this many batches (0: when the round ends)")
	maxRetries := flags.Int("max-retries", mlnode.DefaultSubscribeRetries, "reconnects in a row after a dropped connection (0: none)")
	asJSON := flags.Bool("json", false, "print a JSON object per artifact: round_id, sequence, nonce, vector_b64")
	if err := parse(flags, args, false); err != nil {
		return err
	}
	if *maxBatches < 0 || *maxRetries < 0 || *after < 0 {
		fmt.Fprintln(os.Stderr, "subscribe: --max-batches, --max-retries and --after-sequence must be >= 0")
		return errUsage
	}
	conn, err := connection.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()

	subscription := mlnode.Subscription{
		RoundID:       *roundID,
		AfterSequence: *after,
		MaxRetries:    *maxRetries,
		OnRetry: func(err error, attempt int) {
			fmt.Fprintf(os.Stderr, "subscribe: reconnecting (attempt %d): %s\n", attempt, describe(mlnode.DecodeError(err)))
		},
	}
	if *maxRetries == 0 {
		subscription.MaxRetries = -1 // the library reads 0 as its default
	}
	out := json.NewEncoder(os.Stdout)
	batches := 0
	var end *mlnodev1.SubscriptionEnd
	err = mlnode.NewClient(conn).SubscribeArtifacts(ctx, subscription, func(response *mlnodev1.SubscribeArtifactsResponse) error {
		switch {
		case response.GetBatch() != nil:
			if err := printBatch(out, *asJSON, response.GetRoundId(), response.GetBatch()); err != nil {
				return err
			}
			if batches++; batches == *maxBatches {
				return mlnode.ErrStop
			}
		case response.GetLost() != nil:
			lost := response.GetLost()
			fmt.Fprintf(os.Stderr, "lost batches %d..%d (%d artifacts): they had left the server's buffer\n",
				lost.GetFirstMissingSequence(), lost.GetLastMissingSequence(), lost.GetArtifacts())
		case response.GetEnd() != nil:
			end = response.GetEnd()
			fmt.Fprintln(os.Stderr, strings.TrimSpace(fmt.Sprintf("round ended: %s after batch %d %s",
				endReason(end.GetReason()), end.GetLastSequence(), end.GetDetail())))
		}
		return nil
	})
	if err != nil {
		return errors.New(describe(mlnode.DecodeError(err)))
	}
	if end != nil && end.GetReason() != mlnodev1.SubscriptionEndReason_SUBSCRIPTION_END_REASON_ROUND_STOPPED {
		return fmt.Errorf("the round did not stop cleanly: %s", endReason(end.GetReason()))
	}
	return nil
}

func printBatch(out *json.Encoder, asJSON bool, roundID string, batch *mlnodev1.ArtifactBatch) error {
	artifacts, err := mlnode.DecodeArtifacts(batch)
	if err != nil {
		return err
	}
	for _, artifact := range artifacts {
		if asJSON {
			err = out.Encode(artifactLine{roundID, batch.GetSequence(), artifact.Nonce, artifact.VectorB64})
		} else {
			_, err = fmt.Println(artifact.Nonce, artifact.VectorB64)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// endReason is the reason's name as the Python client spells it: "round_stopped", ...
func endReason(reason mlnodev1.SubscriptionEndReason) string {
	return strings.ToLower(strings.TrimPrefix(reason.String(), "SUBSCRIPTION_END_REASON_"))
}
