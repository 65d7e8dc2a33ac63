package mlnode

import (
	"context"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// fakePoc is an in-process PocService whose SubscribeArtifacts each test scripts, call by call; it
// records every subscription request it received.
type fakePoc struct {
	mlnodev1.UnimplementedPocServiceServer
	mu        sync.Mutex
	requests  []*mlnodev1.SubscribeArtifactsRequest
	subscribe func(call int, stream mlnodev1.PocService_SubscribeArtifactsServer) error
}

func (f *fakePoc) SubscribeArtifacts(request *mlnodev1.SubscribeArtifactsRequest, stream mlnodev1.PocService_SubscribeArtifactsServer) error {
	f.mu.Lock()
	f.requests = append(f.requests, request)
	call := len(f.requests)
	f.mu.Unlock()
	return f.subscribe(call, stream)
}

func (f *fakePoc) received() []*mlnodev1.SubscribeArtifactsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*mlnodev1.SubscribeArtifactsRequest(nil), f.requests...)
}

func servePoc(t *testing.T, poc *fakePoc) *Client {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	mlnodev1.RegisterPocServiceServer(server, poc)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	return NewClient(dial(t, listener.Addr().String()))
}

func batchEvent(sequence int64) *mlnodev1.SubscribeArtifactsResponse {
	return &mlnodev1.SubscribeArtifactsResponse{RoundId: "round-1", Event: &mlnodev1.SubscribeArtifactsResponse_Batch{
		Batch: &mlnodev1.ArtifactBatch{Sequence: sequence, Nonces: []int64{sequence}, KDim: 1, Vectors: []byte{0, 0x3C}},
	}}
}

func endEvent(last int64) *mlnodev1.SubscribeArtifactsResponse {
	return &mlnodev1.SubscribeArtifactsResponse{RoundId: "round-1", Event: &mlnodev1.SubscribeArtifactsResponse_End{
		End: &mlnodev1.SubscriptionEnd{Reason: mlnodev1.SubscriptionEndReason_SUBSCRIPTION_END_REASON_ROUND_STOPPED, LastSequence: last},
	}}
}

// send sends events in order, then returns result (nil: the stream closes cleanly).
func send(stream mlnodev1.PocService_SubscribeArtifactsServer, result error, events ...*mlnodev1.SubscribeArtifactsResponse) error {
	for _, event := range events {
		if err := stream.Send(event); err != nil {
			return err
		}
	}
	return result
}

// dropped is what a reset connection looks like to the client: UNAVAILABLE without a reason.
var dropped = status.Error(codes.Unavailable, "connection reset")

var fast = Subscription{RetryDelay: time.Millisecond}

// collect subscribes and returns what handle saw: batch sequences, then "lost"/"end" markers.
func collect(t *testing.T, client *Client, subscription Subscription) ([]interface{}, error) {
	t.Helper()
	var seen []interface{}
	err := client.SubscribeArtifacts(context.Background(), subscription, func(r *mlnodev1.SubscribeArtifactsResponse) error {
		switch {
		case r.GetBatch() != nil:
			seen = append(seen, r.GetBatch().GetSequence())
		case r.GetLost() != nil:
			seen = append(seen, "lost")
		case r.GetEnd() != nil:
			seen = append(seen, "end")
		}
		return nil
	})
	return seen, err
}

func TestSubscribeResumesAfterTheLastSequenceOnTheSameRound(t *testing.T) {
	poc := &fakePoc{subscribe: func(call int, stream mlnodev1.PocService_SubscribeArtifactsServer) error {
		switch call {
		case 1:
			return send(stream, dropped, batchEvent(1), batchEvent(2))
		case 2: // cut by a proxy: closed cleanly without the end
			return send(stream, nil, batchEvent(3))
		default:
			return send(stream, nil, batchEvent(4), endEvent(4))
		}
	}}
	seen, err := collect(t, servePoc(t, poc), fast)
	if err != nil {
		t.Fatal(err)
	}
	if want := []interface{}{int64(1), int64(2), int64(3), int64(4), "end"}; !reflect.DeepEqual(seen, want) {
		t.Fatalf("saw %v, want %v", seen, want)
	}
	var resumed [][2]interface{}
	for _, r := range poc.received() {
		resumed = append(resumed, [2]interface{}{r.GetRoundId(), r.GetAfterSequence()})
	}
	// The first call asked for "the running round"; the resumes name the round it turned out to be.
	if want := [][2]interface{}{{"", int64(0)}, {"round-1", int64(2)}, {"round-1", int64(3)}}; !reflect.DeepEqual(resumed, want) {
		t.Fatalf("requests %v, want %v", resumed, want)
	}
}

func TestSubscribeResumesPastALostRange(t *testing.T) {
	lost := &mlnodev1.SubscribeArtifactsResponse{RoundId: "round-1", Event: &mlnodev1.SubscribeArtifactsResponse_Lost{
		Lost: &mlnodev1.ArtifactsLost{FirstMissingSequence: 1, LastMissingSequence: 9, Batches: 9, Artifacts: 9},
	}}
	poc := &fakePoc{subscribe: func(call int, stream mlnodev1.PocService_SubscribeArtifactsServer) error {
		if call == 1 {
			return send(stream, dropped, lost)
		}
		return send(stream, nil, batchEvent(10), endEvent(10))
	}}
	seen, err := collect(t, servePoc(t, poc), fast)
	if err != nil || !reflect.DeepEqual(seen, []interface{}{"lost", int64(10), "end"}) {
		t.Fatalf("saw %v, %v", seen, err)
	}
	if after := poc.received()[1].GetAfterSequence(); after != 9 {
		t.Fatalf("resumed after %d, want 9 (past the lost range)", after)
	}
}

func TestSubscribeReconnectsAtMostMaxRetriesInARow(t *testing.T) {
	poc := &fakePoc{subscribe: func(int, mlnodev1.PocService_SubscribeArtifactsServer) error { return dropped }}
	var attempts []int
	subscription := Subscription{MaxRetries: 3, RetryDelay: time.Millisecond, OnRetry: func(_ error, attempt int) { attempts = append(attempts, attempt) }}
	_, err := collect(t, servePoc(t, poc), subscription)
	if d := DecodeError(err); d.Code != codes.Unavailable || d.Message != "connection reset" {
		t.Fatalf("returned %v; want the last drop", err)
	}
	if calls := len(poc.received()); calls != 4 || !reflect.DeepEqual(attempts, []int{1, 2, 3}) {
		t.Fatalf("%d calls, retries %v; want 4 calls (1 + 3 retries)", calls, attempts)
	}
}

func TestSubscribeCountsRetriesPerOutage(t *testing.T) {
	// Each call delivers a batch and drops: far more drops than MaxRetries, none of them in a row.
	poc := &fakePoc{subscribe: func(call int, stream mlnodev1.PocService_SubscribeArtifactsServer) error {
		if call == 6 {
			return send(stream, nil, endEvent(5))
		}
		return send(stream, dropped, batchEvent(int64(call)))
	}}
	seen, err := collect(t, servePoc(t, poc), Subscription{MaxRetries: 1, RetryDelay: time.Millisecond})
	if err != nil || len(seen) != 6 {
		t.Fatalf("saw %v, %v; want 5 batches and the end", seen, err)
	}
}

func TestSubscribeReturnsTheServersOwnErrorsAtOnce(t *testing.T) {
	for _, refusal := range []error{
		reasonError(codes.Unavailable, mlnodev1.ErrorReason_SHUTTING_DOWN),
		reasonError(codes.NotFound, mlnodev1.ErrorReason_ROUND_NOT_FOUND),
	} {
		poc := &fakePoc{subscribe: func(int, mlnodev1.PocService_SubscribeArtifactsServer) error { return refusal }}
		_, err := collect(t, servePoc(t, poc), fast)
		if d := DecodeError(err); d.Code != status.Code(refusal) || d.Reason == "" || len(poc.received()) != 1 {
			t.Fatalf("%v: returned %v after %d calls; want it after one", refusal, err, len(poc.received()))
		}
	}
}

func TestSubscribeStopsWhenTheHandlerSaysSo(t *testing.T) {
	cancelled := make(chan struct{})
	poc := &fakePoc{subscribe: func(_ int, stream mlnodev1.PocService_SubscribeArtifactsServer) error {
		for sequence := int64(1); ; sequence++ {
			if err := stream.Send(batchEvent(sequence)); err != nil {
				break
			}
			if stream.Context().Err() != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(cancelled)
		return stream.Context().Err()
	}}
	batches := 0
	err := servePoc(t, poc).SubscribeArtifacts(context.Background(), fast, func(*mlnodev1.SubscribeArtifactsResponse) error {
		batches++
		if batches == 3 {
			return ErrStop
		}
		return nil
	})
	if err != nil || batches != 3 {
		t.Fatalf("%d batches, %v; want 3 and nil", batches, err)
	}
	select {
	case <-cancelled: // the server saw the call end: it frees the subscription
	case <-time.After(5 * time.Second):
		t.Fatal("the server's stream was not cancelled")
	}
}
