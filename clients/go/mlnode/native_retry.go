package mlnode

import "fmt"

// grpcMaxAttempts is grpc-go's own cap on a retry policy's attempts.
const grpcMaxAttempts = 5

// WithNativeRetry installs a gRPC retry policy (service config) for InferenceService and
// ValidationService: a call answered UNAVAILABLE is sent again, up to maxAttempts (2..5) in all,
// after the server's grpc-retry-pushback-ms trailer when it sends one (exponential backoff from
// 0.5 s otherwise).
//
// What grpc-go does with it, and does not:
//   - grpc-go before 1.40 (Debian's 1.33 included) ignores retry policies unless the environment
//     holds GRPC_GO_RETRY=on when the process starts; from 1.40 they are on by default.
//   - It retries every UNAVAILABLE, whatever its reason (POC_IN_PROGRESS, ENGINE_PAUSED, SHUTTING_DOWN,
//     a refused connection), and only while the server has sent nothing but the status
//     (trailers-only): a Generate stream that has delivered a message is never sent again, so a
//     POC_PREEMPTED stream is not retried.
//   - The error it finally returns is the last attempt's, with its details; RetryInfo itself is not
//     read. RetryWhilePoc is the explicit alternative, limited to POC_IN_PROGRESS; use one or the
//     other, or the attempts multiply.
func WithNativeRetry(maxAttempts int) Option {
	return func(s *settings) error {
		if maxAttempts < 2 || maxAttempts > grpcMaxAttempts {
			return fmt.Errorf("mlnode: native retry attempts must be 2..%d (grpc's cap), got %d", grpcMaxAttempts, maxAttempts)
		}
		s.serviceConfig = fmt.Sprintf(`{"methodConfig": [{
			"name": [{"service": %q}, {"service": %q}],
			"retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.5s", "maxBackoff": "10s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
			InferenceService, ValidationService, maxAttempts)
		return nil
	}
}
