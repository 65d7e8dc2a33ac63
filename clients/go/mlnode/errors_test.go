package mlnode

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// invalidTemperature is what the server answers a negative temperature with (server/errors.py):
// ErrorInfo with the field in its metadata, and BadRequest naming it.
func invalidTemperature(t *testing.T) error {
	t.Helper()
	st, err := status.New(codes.InvalidArgument, "sampling.temperature: must be >= 0").WithDetails(
		&errdetails.ErrorInfo{
			Reason:   mlnodev1.ErrorReason_INVALID_FIELD.String(),
			Domain:   ErrorDomain,
			Metadata: map[string]string{"field": "sampling.temperature"},
		},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "sampling.temperature", Description: "sampling.temperature: must be >= 0"},
		}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)},
	)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestDecodeErrorReadsEveryDetail(t *testing.T) {
	got := DecodeError(invalidTemperature(t))
	want := &ErrorDetails{
		Code:            codes.InvalidArgument,
		Message:         "sampling.temperature: must be >= 0",
		Reason:          "INVALID_FIELD",
		Domain:          "mlnode.gonka.ai",
		Metadata:        map[string]string{"field": "sampling.temperature"},
		RetryDelay:      1500 * time.Millisecond,
		HasRetryDelay:   true,
		FieldViolations: []FieldViolation{{Field: "sampling.temperature", Description: "sampling.temperature: must be >= 0"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeError:\n got %+v\nwant %+v", got, want)
	}
	if !got.HasReason(mlnodev1.ErrorReason_INVALID_FIELD) || got.HasReason(mlnodev1.ErrorReason_POC_IN_PROGRESS) {
		t.Fatalf("HasReason disagrees with reason %q", got.Reason)
	}
}

func TestDecodeErrorUnwrapsAWrappedStatus(t *testing.T) {
	got := DecodeError(fmt.Errorf("generate: %w", invalidTemperature(t)))
	if got.Code != codes.InvalidArgument || got.Reason != "INVALID_FIELD" || len(got.FieldViolations) != 1 {
		t.Fatalf("wrapped status decoded as %+v", got)
	}
}

func TestDecodeErrorOfAStatusWithoutDetails(t *testing.T) {
	got := DecodeError(status.Error(codes.ResourceExhausted, "grpc: received message larger than max"))
	want := &ErrorDetails{Code: codes.ResourceExhausted, Message: "grpc: received message larger than max"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestDecodeErrorOfOtherErrors(t *testing.T) {
	if DecodeError(nil) != nil {
		t.Fatal("a nil error must decode as nil")
	}
	got := DecodeError(errors.New("boom"))
	if got.Code != codes.Unknown || got.Message != "boom" || got.Reason != "" {
		t.Fatalf("a plain error decoded as %+v", got)
	}
}

func TestHasReasonNeedsTheServersDomain(t *testing.T) {
	st, _ := status.New(codes.Unavailable, "elsewhere").WithDetails(&errdetails.ErrorInfo{Reason: "POC_IN_PROGRESS", Domain: "example.com"})
	if DecodeError(st.Err()).HasReason(mlnodev1.ErrorReason_POC_IN_PROGRESS) {
		t.Fatal("a reason from another domain is not this server's")
	}
}

// The details survive the trailer encoding of a real connection.
func TestDecodeErrorOfAnErrorFromTheWire(t *testing.T) {
	fake := &fakeInference{getModelInfo: func(int32, context.Context) (*mlnodev1.GetModelInfoResponse, error) {
		return nil, invalidTemperature(t)
	}}
	address, _ := serve(t, fake)
	_, err := mlnodev1.NewInferenceServiceClient(dial(t, address)).GetModelInfo(context.Background(), &mlnodev1.GetModelInfoRequest{})
	if got, want := DecodeError(err), DecodeError(invalidTemperature(t)); !reflect.DeepEqual(got, want) {
		t.Fatalf("over the wire:\n got %+v\nwant %+v", got, want)
	}
}
