// Package mlnode is a thin helper around the generated stubs (package mlnodev1) for the gonka ML
// node's gRPC server: a connection with the settings the server accepts (Dial), a method per RPC
// (Client), per-service health (ServiceStatus), the server's rich errors (DecodeError), waiting out
// Proof-of-Compute rounds (RetryWhilePoc) and PoC artifacts in the network's form (DecodeArtifacts).
//
//	conn, err := mlnode.Dial(ctx, "127.0.0.1:50051")
//	info, err := mlnode.NewClient(conn).GetModelInfo(ctx)
package mlnode

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

const (
	// ServerMinPingInterval is the server's grpc.http2.min_ping_interval_without_data_ms: a client
	// that pings more often (without data) is sent GOAWAY too_many_pings and loses its connection.
	ServerMinPingInterval = 10 * time.Second
	// DefaultKeepalive is how long the connection stays quiet before the client pings, matching the
	// server's own keepalive_time.
	DefaultKeepalive = 30 * time.Second
	// DefaultMaxRequestBytes is the server's default --max-request-mb (16 MiB).
	DefaultMaxRequestBytes = 16 << 20
	// MaxResponseBytes is the largest message the server sends (its max_send_message_length).
	MaxResponseBytes = 64 << 20
	keepaliveTimeout = 10 * time.Second
)

// Dial opens a connection to an ML node (lazily, as grpc.DialContext does without WithBlock).
// Without options it is plaintext, with the server's keepalive and message-size limits. It never
// turns on grpc's channel-wide client-side health checking: that would take the whole connection
// out of service while one service (inference, during a PoC round) reports NOT_SERVING, and a
// PoC client must keep working then. Check services one by one with ServiceStatus.
func Dial(ctx context.Context, target string, options ...Option) (*grpc.ClientConn, error) {
	s := settings{keepalive: DefaultKeepalive, maxRequestBytes: DefaultMaxRequestBytes}
	for _, option := range options {
		if err := option(&s); err != nil {
			return nil, err
		}
	}
	dialOptions, err := s.dialOptions()
	if err != nil {
		return nil, err
	}
	return grpc.DialContext(ctx, target, dialOptions...)
}

func (s *settings) dialOptions() ([]grpc.DialOption, error) {
	dialOptions := []grpc.DialOption{
		s.transport(),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:    s.keepalive,
			Timeout: keepaliveTimeout,
			// The server permits pings without calls (keepalive_permit_without_calls).
			PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxResponseBytes),
			// A larger request fails here (RESOURCE_EXHAUSTED) instead of crossing the network first.
			grpc.MaxCallSendMsgSize(s.maxRequestBytes),
		),
	}
	if s.token != "" {
		if s.tls == nil && !s.tokenWithoutTLS {
			return nil, errors.New("mlnode: a bearer token over plaintext would expose it: use WithTLS, or AllowTokenWithoutTLS (e.g. behind a TLS-terminating proxy on the same host)")
		}
		dialOptions = append(dialOptions, grpc.WithPerRPCCredentials(bearerToken{token: s.token, requireTLS: !s.tokenWithoutTLS}))
	}
	if s.serviceConfig != "" {
		dialOptions = append(dialOptions, grpc.WithDefaultServiceConfig(s.serviceConfig))
	}
	return dialOptions, nil
}
