package mlnode

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// scripted returns a call that answers with errs in turn (nil past the end), counting its calls.
func scripted(errs ...error) (func(context.Context) error, *int) {
	calls := 0
	return func(context.Context) error {
		calls++
		if calls <= len(errs) {
			return errs[calls-1]
		}
		return nil
	}, &calls
}

func TestRetryWhilePocWaitsTheServersDelay(t *testing.T) {
	call, calls := scripted(pocInProgress(40*time.Millisecond), pocInProgress(60*time.Millisecond))
	start := time.Now()
	if err := RetryWhilePoc(context.Background(), 5, call); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); *calls != 3 || elapsed < 100*time.Millisecond {
		t.Fatalf("%d calls in %v; want 3 calls, at least the 100 ms the server asked for", *calls, elapsed)
	}
}

func TestRetryWhilePocStopsAfterMaxAttempts(t *testing.T) {
	call, calls := scripted(pocInProgress(time.Millisecond), pocInProgress(time.Millisecond), pocInProgress(time.Millisecond))
	err := RetryWhilePoc(context.Background(), 2, call)
	if *calls != 2 || !DecodeError(err).HasReason(mlnodev1.ErrorReason_POC_IN_PROGRESS) {
		t.Fatalf("%d calls, error %v; want 2 calls and the last POC_IN_PROGRESS", *calls, err)
	}
}

func TestRetryWhilePocLeavesOtherErrorsAlone(t *testing.T) {
	for _, refusal := range []error{
		reasonError(codes.Unavailable, mlnodev1.ErrorReason_POC_PREEMPTED), // tokens were delivered
		reasonError(codes.Unavailable, mlnodev1.ErrorReason_SHUTTING_DOWN),
		reasonError(codes.InvalidArgument, mlnodev1.ErrorReason_INVALID_FIELD),
	} {
		call, calls := scripted(refusal)
		if err := RetryWhilePoc(context.Background(), 5, call); err != refusal || *calls != 1 {
			t.Fatalf("%v: %d calls, returned %v; want one call and that error", refusal, *calls, err)
		}
	}
}

func TestRetryWhilePocReturnsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	call, calls := scripted(pocInProgress(10 * time.Second))
	start := time.Now()
	err := RetryWhilePoc(ctx, 5, call)
	if elapsed := time.Since(start); elapsed > 2*time.Second || *calls != 1 || !DecodeError(err).HasReason(mlnodev1.ErrorReason_POC_IN_PROGRESS) {
		t.Fatalf("after %v and %d calls: %v; want a prompt return with the POC_IN_PROGRESS error", elapsed, *calls, err)
	}
}

func TestRetryWhilePocDoesNotWaitPastTheDeadline(t *testing.T) {
	// Waiting would end with the context, at 5 s; knowing the retry comes too late, it returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	call, calls := scripted(pocInProgress(30 * time.Second))
	start := time.Now()
	err := RetryWhilePoc(ctx, 5, call)
	if elapsed := time.Since(start); elapsed > 2*time.Second || *calls != 1 || err == nil {
		t.Fatalf("after %v and %d calls: %v; want an immediate return with the error", elapsed, *calls, err)
	}
}

func TestRetryWhilePocAgainstAServer(t *testing.T) {
	fake := &fakeInference{getModelInfo: func(call int32, _ context.Context) (*mlnodev1.GetModelInfoResponse, error) {
		if call <= 2 {
			return nil, pocInProgress(50 * time.Millisecond)
		}
		return &mlnodev1.GetModelInfoResponse{ServedModelName: "tiny"}, nil
	}}
	address, _ := serve(t, fake)
	client := mlnodev1.NewInferenceServiceClient(dial(t, address))
	var info *mlnodev1.GetModelInfoResponse
	err := RetryWhilePoc(context.Background(), 5, func(ctx context.Context) (err error) {
		info, err = client.GetModelInfo(ctx, &mlnodev1.GetModelInfoRequest{})
		return err
	})
	if err != nil || info.GetServedModelName() != "tiny" || fake.callCount() != 3 {
		t.Fatalf("got %v, %v after %d calls; want the model's info on the third", info, err, fake.callCount())
	}
}
