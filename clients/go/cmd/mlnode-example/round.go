package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
	"github.com/gonka-ai/mlnode-grpc/clients/go/mlnode"
)

const roundUsage = "usage: mlnode-example round <start|stop|status> [flags] (-h for an action's flags)"

// runRound drives a mining round: `round start`, `round stop`, `round status`. Each prints the
// round's status as one JSON line (the RoundStatus message in proto3 JSON, proto field names).
func runRound(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, roundUsage)
		return errUsage
	}
	flags := flag.NewFlagSet("round "+args[0], flag.ContinueOnError)
	connection := addConnectionFlags(flags)
	var call func(context.Context, *mlnode.Client) (*mlnodev1.RoundStatus, error)
	switch args[0] {
	case "start":
		call = addStartFlags(flags)
	case "stop", "status":
		roundID := flags.String("round-id", "", "the round (default: the running round; status: else the most recent one)")
		call = func(ctx context.Context, client *mlnode.Client) (*mlnodev1.RoundStatus, error) {
			if args[0] == "stop" {
				return client.StopRound(ctx, *roundID)
			}
			return client.GetRoundStatus(ctx, *roundID)
		}
	default:
		fmt.Fprintln(os.Stderr, roundUsage)
		return errUsage
	}
	if err := parse(flags, args[1:], false); err != nil {
		return err
	}
	conn, err := connection.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	status, err := call(ctx, mlnode.NewClient(conn))
	if err != nil {
		return errors.New(describe(mlnode.DecodeError(err)))
	}
	text, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(status)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(text))
	return err
}

// addStartFlags adds `round start`'s flags and returns the call they configure. The server checks
// the values (INVALID_ARGUMENT naming the field); unset optional flags keep the server's defaults.
func addStartFlags(flags *flag.FlagSet) func(context.Context, *mlnode.Client) (*mlnodev1.RoundStatus, error) {
	request := &mlnodev1.StartRoundRequest{Params: &mlnodev1.PocParams{}}
	flags.StringVar(&request.BlockHash, "block-hash", "", "the chain block hash that seeds the round (required)")
	flags.Int64Var(&request.BlockHeight, "block-height", 0, "its height")
	flags.StringVar(&request.PublicKey, "public-key", "", "the participant's public key (required)")
	nodeID := flags.Int("node-id", 0, "this node's place among the participant's nodes")
	nodeCount := flags.Int("node-count", 0, "the participant's nodes (0: the server's default, 1)")
	groupID := flags.Int("group-id", 0, "this engine replica's group")
	groupCount := flags.Int("group-count", 0, "groups on the machine (0: the server's default, 1)")
	flags.StringVar(&request.Params.Model, "model", "", "the served model's name (default: asked with GetModelInfo)")
	seqLen := flags.Int("seq-len", 0, "tokens per nonce (required; the network runs 1024)")
	kDim := flags.Int("k-dim", 0, "coordinates per artifact (unset: the server's default, 12)")
	batchSize := flags.Int("batch-size", 0, "nonces per forward (unset: the server's default, 32)")
	flags.BoolVar(&request.StrongerRng, "stronger-rng", false, "the stronger input RNG (poc-v2.md section 3)")
	flags.StringVar(&request.CallbackUrl, "callback-url", "", "also POST artifacts to URL/generated")
	return func(ctx context.Context, client *mlnode.Client) (*mlnodev1.RoundStatus, error) {
		request.NodeId, request.NodeCount = int32(*nodeID), int32(*nodeCount)
		request.GroupId, request.GroupCount = int32(*groupID), int32(*groupCount)
		request.Params.SeqLen = int32(*seqLen)
		// Presence matters (proto3 optional): only a flag given on the command line is sent.
		flags.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "k-dim":
				request.Params.KDim = proto.Int32(int32(*kDim))
			case "batch-size":
				request.BatchSize = proto.Int32(int32(*batchSize))
			}
		})
		if request.Params.Model == "" {
			info, err := client.GetModelInfo(ctx)
			if err != nil {
				return nil, err
			}
			request.Params.Model = info.GetServedModelName()
		}
		return client.StartRound(ctx, request)
	}
}
