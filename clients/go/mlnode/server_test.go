package mlnode

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// fakeInference is an in-process InferenceService whose answers each test scripts; calls counts
// every RPC it received.
type fakeInference struct {
	mlnodev1.UnimplementedInferenceServiceServer
	calls        int32
	getModelInfo func(call int32, ctx context.Context) (*mlnodev1.GetModelInfoResponse, error)
	generate     func(call int32, stream mlnodev1.InferenceService_GenerateServer) error
}

func (f *fakeInference) GetModelInfo(ctx context.Context, _ *mlnodev1.GetModelInfoRequest) (*mlnodev1.GetModelInfoResponse, error) {
	return f.getModelInfo(atomic.AddInt32(&f.calls, 1), ctx)
}

func (f *fakeInference) Generate(_ *mlnodev1.GenerateRequest, stream mlnodev1.InferenceService_GenerateServer) error {
	return f.generate(atomic.AddInt32(&f.calls, 1), stream)
}

func (f *fakeInference) Abort(context.Context, *mlnodev1.AbortRequest) (*mlnodev1.AbortResponse, error) {
	atomic.AddInt32(&f.calls, 1)
	return &mlnodev1.AbortResponse{}, nil
}

func (f *fakeInference) callCount() int32 {
	return atomic.LoadInt32(&f.calls)
}

// serve starts a gRPC server on a loopback port with the standard health service (and inference,
// when given), stopped when the test ends.
func serve(t *testing.T, inference *fakeInference, options ...grpc.ServerOption) (string, *health.Server) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(options...)
	healthServer := health.NewServer()
	healthpb.RegisterHealthServer(server, healthServer)
	if inference != nil {
		mlnodev1.RegisterInferenceServiceServer(server, inference)
	}
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	return listener.Addr().String(), healthServer
}

// dial connects to a test server and closes the connection when the test ends.
func dial(t *testing.T, target string, options ...Option) *grpc.ClientConn {
	t.Helper()
	conn, err := Dial(context.Background(), target, options...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// pocInProgress is the server's answer while a mining round runs.
func pocInProgress(delay time.Duration) error {
	st, err := status.New(codes.Unavailable, "a PoC round is running").WithDetails(
		&errdetails.ErrorInfo{Reason: mlnodev1.ErrorReason_POC_IN_PROGRESS.String(), Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)},
	)
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// reasonError is an error of the server's with no retry delay.
func reasonError(code codes.Code, reason mlnodev1.ErrorReason) error {
	st, err := status.New(code, reason.String()).WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: ErrorDomain})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
