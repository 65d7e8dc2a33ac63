package mlnode

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

const pushbackTrailer = "grpc-retry-pushback-ms"

// inRetryProcess runs the calling test again in a child process with GRPC_GO_RETRY=on (grpc-go
// 1.33 reads it once, at start) and reports false; in that child it reports true.
func inRetryProcess(t *testing.T) bool {
	if os.Getenv("GRPC_GO_RETRY") == "on" {
		return true
	}
	child := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	child.Env = append(os.Environ(), "GRPC_GO_RETRY=on")
	output, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("with GRPC_GO_RETRY=on: %v\n%s", err, output)
	}
	return false
}

func TestNativeRetryFollowsThePushback(t *testing.T) {
	if !inRetryProcess(t) {
		return
	}
	fake := &fakeInference{getModelInfo: func(call int32, ctx context.Context) (*mlnodev1.GetModelInfoResponse, error) {
		if call == 1 {
			grpc.SetTrailer(ctx, metadata.Pairs(pushbackTrailer, "300"))
			return nil, pocInProgress(300 * time.Millisecond)
		}
		return &mlnodev1.GetModelInfoResponse{ServedModelName: "tiny"}, nil
	}}
	address, _ := serve(t, fake)
	client := mlnodev1.NewInferenceServiceClient(dial(t, address, WithNativeRetry(3)))
	start := time.Now()
	info, err := client.GetModelInfo(context.Background(), &mlnodev1.GetModelInfoRequest{})
	if elapsed := time.Since(start); err != nil || info.GetServedModelName() != "tiny" || fake.callCount() != 2 || elapsed < 300*time.Millisecond {
		t.Fatalf("%v, %v after %d calls in %v; want the info on the second call, after the 300 ms pushback", info, err, fake.callCount(), elapsed)
	}
}

// A stream that has delivered a message is committed: grpc does not send it again.
func TestNativeRetryLeavesAStartedStream(t *testing.T) {
	if !inRetryProcess(t) {
		return
	}
	fake := &fakeInference{generate: func(_ int32, stream mlnodev1.InferenceService_GenerateServer) error {
		if err := stream.Send(&mlnodev1.GenerateResponse{Tokens: &mlnodev1.TokenBatch{Ids: []uint32{7}}}); err != nil {
			return err
		}
		stream.SetTrailer(metadata.Pairs(pushbackTrailer, "10"))
		return reasonError(codes.Unavailable, mlnodev1.ErrorReason_POC_PREEMPTED)
	}}
	address, _ := serve(t, fake)
	client := mlnodev1.NewInferenceServiceClient(dial(t, address, WithNativeRetry(3)))
	stream, err := client.Generate(context.Background(), &mlnodev1.GenerateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var received int
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
		received++
	}
	if err == io.EOF || !DecodeError(err).HasReason(mlnodev1.ErrorReason_POC_PREEMPTED) || received != 1 || fake.callCount() != 1 {
		t.Fatalf("%d messages, then %v, after %d calls; want 1 message, POC_PREEMPTED, one call", received, err, fake.callCount())
	}
}

func TestNativeRetryAttemptsAreGrpcs(t *testing.T) {
	for _, attempts := range []int{1, 6} {
		if _, err := Dial(context.Background(), "127.0.0.1:1", WithNativeRetry(attempts)); err == nil {
			t.Errorf("%d attempts: accepted, but grpc needs 2..5", attempts)
		}
	}
	conn, err := Dial(context.Background(), "127.0.0.1:1", WithNativeRetry(5))
	if err != nil {
		t.Fatalf("grpc must accept the service config: %v", err)
	}
	conn.Close()
}
