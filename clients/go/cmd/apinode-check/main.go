// Command apinode-check calls an ML node's HTTP management API as the network's API node does, with typed
// bodies of the API node's JSON names (written from ../shared/spec/mlnode-http-api.md alone), and prints each
// answer as it decoded it, one JSON line:
//
//	apinode-check --node http://127.0.0.1:8080 state
//	apinode-check --node http://127.0.0.1:8080 init-generate --block-hash H --block-height 7 --public-key K \
//	    --node-id 1 --node-count 3 --model M --seq-len 64 --url http://127.0.0.1:9100/v2/poc-batches/m
//	apinode-check --node URL status | pow-stop | stop | versions | health | clock
//	apinode-check --node URL inference-up --model M
//	apinode-check --node URL generate --request job.json
//	apinode-check --node URL send --method POST --path /api/v1/inference/up --body '{"model": 5}'
//
// A status >= 400 prints {"http_status": N, "error": {...}} (the node's error body as decoded) and exits 1;
// any other failure exits 1 with its message on stderr; bad usage exits 2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

type command func(ctx context.Context, node *NodeClient, args []string) (interface{}, error)

var commands = map[string]command{
	"state":         func(ctx context.Context, n *NodeClient, _ []string) (interface{}, error) { return n.State(ctx) },
	"versions":      func(ctx context.Context, n *NodeClient, _ []string) (interface{}, error) { return n.Versions(ctx) },
	"status":        func(ctx context.Context, n *NodeClient, _ []string) (interface{}, error) { return n.PowStatus(ctx) },
	"pow-stop":      func(ctx context.Context, n *NodeClient, _ []string) (interface{}, error) { return n.PowStop(ctx) },
	"stop":          func(ctx context.Context, n *NodeClient, _ []string) (interface{}, error) { return n.Stop(ctx) },
	"clock":         func(ctx context.Context, n *NodeClient, _ []string) (interface{}, error) { return n.Clock(ctx) },
	"health":        runHealth,
	"inference-up":  runInferenceUp,
	"init-generate": runInitGenerate,
	"generate":      runGenerate,
	"send":          runSend,
}

var errUsage = errors.New("usage")

func main() {
	flags := flag.NewFlagSet("apinode-check", flag.ContinueOnError)
	base := flags.String("node", "http://127.0.0.1:8080", "the node's pocUrl (with an optional /{version} prefix)")
	if err := flags.Parse(os.Args[1:]); err != nil || flags.NArg() < 1 || commands[flags.Arg(0)] == nil {
		fmt.Fprintln(os.Stderr, "usage: apinode-check --node URL <command> [flags]; commands:", names())
		os.Exit(2)
	}
	node := newNodeClient(strings.TrimRight(*base, "/"))
	answer, err := commands[flags.Arg(0)](context.Background(), node, flags.Args()[1:])
	var refused *HTTPError
	switch {
	case errors.Is(err, errUsage):
		os.Exit(2)
	case errors.As(err, &refused):
		printJSON(map[string]interface{}{"http_status": refused.Status, "error": refused.Body.Error})
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "apinode-check:", err)
		os.Exit(1)
	}
	printJSON(answer)
}

func names() string {
	var list []string
	for name := range commands {
		list = append(list, name)
	}
	sort.Strings(list)
	return strings.Join(list, ", ")
}

func printJSON(value interface{}) {
	encoded, err := json.Marshal(value)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apinode-check:", err)
		os.Exit(1)
	}
	fmt.Println(string(encoded))
}

func parse(flags *flag.FlagSet, args []string) error {
	if err := flags.Parse(args); err != nil {
		return errUsage
	}
	return nil
}

func runHealth(ctx context.Context, node *NodeClient, _ []string) (interface{}, error) {
	if err := node.Health(ctx); err != nil {
		return nil, err
	}
	return map[string]bool{"healthy": true}, nil
}

func runInferenceUp(ctx context.Context, node *NodeClient, args []string) (interface{}, error) {
	flags := flag.NewFlagSet("inference-up", flag.ContinueOnError)
	model := flags.String("model", "", "the model to serve (the API node's LoadModel)")
	if err := parse(flags, args); err != nil {
		return nil, err
	}
	return node.InferenceUp(ctx, InferenceUpRequest{Model: *model, Dtype: "auto", AdditionalArgs: []string{}})
}

func runInitGenerate(ctx context.Context, node *NodeClient, args []string) (interface{}, error) {
	flags := flag.NewFlagSet("init-generate", flag.ContinueOnError)
	var request PoCInitGenerateRequestV2
	flags.StringVar(&request.BlockHash, "block-hash", "", "the PoC stage's block hash")
	flags.Int64Var(&request.BlockHeight, "block-height", 0, "its height")
	flags.StringVar(&request.PublicKey, "public-key", "", "the participant's public key")
	flags.Int64Var(&request.NodeID, "node-id", 0, "this node's number")
	flags.Int64Var(&request.NodeCount, "node-count", 1, "the participant's node count")
	flags.StringVar(&request.Params.Model, "model", "", "the model")
	flags.Int64Var(&request.Params.SeqLen, "seq-len", 0, "the sequence length")
	flags.StringVar(&request.URL, "url", "", "the callback base: artifacts go to {url}/generated")
	if err := parse(flags, args); err != nil {
		return nil, err
	}
	return node.InitGenerate(ctx, request)
}

func runGenerate(ctx context.Context, node *NodeClient, args []string) (interface{}, error) {
	flags := flag.NewFlagSet("generate", flag.ContinueOnError)
	path := flags.String("request", "", "a JSON file holding the PoCGenerateRequestV2")
	if err := parse(flags, args); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(*path)
	if err != nil {
		return nil, err
	}
	var request PoCGenerateRequestV2
	decoder := json.NewDecoder(strings.NewReader(string(raw)))
	// The file must say what the struct says: a misspelt field would otherwise be dropped unseen.
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&request); err != nil {
		return nil, fmt.Errorf("%s: %w", *path, err)
	}
	return node.Generate(ctx, request)
}

func runSend(ctx context.Context, node *NodeClient, args []string) (interface{}, error) {
	flags := flag.NewFlagSet("send", flag.ContinueOnError)
	method := flags.String("method", "POST", "the HTTP method")
	path := flags.String("path", "", "the path, e.g. /api/v1/inference/up")
	body := flags.String("body", "", "the raw body")
	if err := parse(flags, args); err != nil {
		return nil, err
	}
	var answer json.RawMessage
	if err := node.Send(ctx, *method, *path, []byte(*body), &answer); err != nil {
		return nil, err
	}
	return answer, nil
}
