package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// chatMessages collects repeated --message ROLE:CONTENT flags, in order.
type chatMessages []*mlnodev1.ChatMessage

func (m *chatMessages) String() string { return fmt.Sprint(len(*m), " messages") }

func (m *chatMessages) Set(value string) error {
	role, content := value, ""
	if i := strings.IndexByte(value, ':'); i >= 0 {
		role, content = value[:i], value[i+1:]
	}
	number, ok := mlnodev1.ChatRole_value["CHAT_ROLE_"+strings.ToUpper(role)]
	if !ok || number == int32(mlnodev1.ChatRole_CHAT_ROLE_UNSPECIFIED) {
		return fmt.Errorf("want ROLE:CONTENT with ROLE system, user, assistant or tool; got %q", value)
	}
	*m = append(*m, &mlnodev1.ChatMessage{Role: mlnodev1.ChatRole(number), Content: content})
	return nil
}

// runChat streams a chat completion, printing its text (or, with --json, its tokens and their
// logprobs) as the messages arrive.
func runChat(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("chat", flag.ContinueOnError)
	connection := addConnectionFlags(flags)
	var messages chatMessages
	flags.Var(&messages, "message", "a chat message ROLE:CONTENT (system, user, assistant, tool); repeatable, in order")
	prompt := flags.String("prompt", "", "a user message, after any --message")
	seed := flags.Int64("seed", 0, "sampling seed (unset: unseeded)")
	temperature := flags.Float64("temperature", 0, "sampling temperature, 0 for greedy (unset: the server's default)")
	maxTokens := flags.Int("max-tokens", 128, "most tokens to generate")
	topLogprobs := flags.Uint("top-logprobs", 0, "report each token's logprob, rank and this many alternatives, 0..20 (unset: none)")
	asJSON := flags.Bool("json", false, "print a JSON object per token and per finished output, and a failure as JSON, on stdout")
	if err := parse(flags, args, false); err != nil {
		return err
	}
	given := map[string]bool{}
	flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["prompt"] {
		messages = append(messages, &mlnodev1.ChatMessage{Role: mlnodev1.ChatRole_CHAT_ROLE_USER, Content: *prompt})
	}
	if len(messages) == 0 {
		fmt.Fprintln(os.Stderr, "chat: give --prompt or --message")
		return errUsage
	}

	// Presence matters (proto3 optional): an unset option is the server's default, not zero.
	request := &mlnodev1.GenerateRequest{
		Input:    &mlnodev1.GenerateRequest_Chat{Chat: &mlnodev1.ChatInput{Messages: messages}},
		Sampling: &mlnodev1.SamplingOptions{MaxTokens: proto.Int32(int32(*maxTokens))},
		// Text is for people; --json prints token ids, and the server then skips detokenizing.
		Stream: &mlnodev1.StreamOptions{IncludeText: !*asJSON},
	}
	if given["seed"] {
		request.Sampling.Seed = proto.Int64(*seed)
	}
	if given["temperature"] {
		request.Sampling.Temperature = proto.Float32(float32(*temperature))
	}
	if given["top-logprobs"] {
		request.Logprobs = &mlnodev1.LogprobsOptions{TopLogprobs: proto.Uint32(uint32(*topLogprobs))}
	}

	var out printer = textPrinter{}
	if *asJSON {
		out = newJSONPrinter(os.Stdout)
	}
	conn, err := connection.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := mlnodev1.NewInferenceServiceClient(conn).Generate(ctx, request)
	if err != nil {
		return out.failure(err)
	}
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return out.failure(err)
		}
		out.message(response)
	}
}
