package mlnode

import (
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// ErrorDomain is google.rpc.ErrorInfo.domain on every error the server returns.
const ErrorDomain = "mlnode.gonka.ai"

// FieldViolation is one google.rpc.BadRequest entry: the request field at fault and why.
type FieldViolation struct {
	Field       string
	Description string
}

// ErrorDetails is what a failed call carried: its status and the google.rpc details the server
// puts in the grpc-status-details-bin trailer.
type ErrorDetails struct {
	Code    codes.Code
	Message string
	// ErrorInfo: Reason is an ErrorReason name (errors.proto); empty when the error has no ErrorInfo
	// (one from grpc itself, such as a refused connection or an oversized message).
	Reason   string
	Domain   string
	Metadata map[string]string
	// RetryInfo's delay, when HasRetryDelay: how long to wait before calling again.
	RetryDelay    time.Duration
	HasRetryDelay bool
	// BadRequest's violations: the fields of an INVALID_ARGUMENT request at fault.
	FieldViolations []FieldViolation
}

// DecodeError reads a failed call's error; nil for a nil error. An error that is not a gRPC status
// (wrapped ones are unwrapped) decodes as codes.Unknown with its text as the message.
func DecodeError(err error) *ErrorDetails {
	if err == nil {
		return nil
	}
	st := grpcStatus(err)
	decoded := &ErrorDetails{Code: st.Code(), Message: st.Message()}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			decoded.Reason, decoded.Domain, decoded.Metadata = d.GetReason(), d.GetDomain(), d.GetMetadata()
		case *errdetails.RetryInfo:
			decoded.RetryDelay, decoded.HasRetryDelay = d.GetRetryDelay().AsDuration(), true
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				decoded.FieldViolations = append(decoded.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	return decoded
}

// HasReason says whether the error is this server's with this ErrorReason.
func (d *ErrorDetails) HasReason(reason mlnodev1.ErrorReason) bool {
	return d != nil && d.Domain == ErrorDomain && d.Reason == reason.String()
}

// grpcStatus finds the status in err or in an error it wraps (grpc 1.33's status.FromError
// looks at err itself only).
func grpcStatus(err error) *status.Status {
	var carrier interface{ GRPCStatus() *status.Status }
	if errors.As(err, &carrier) {
		return carrier.GRPCStatus()
	}
	return status.New(codes.Unknown, err.Error())
}
