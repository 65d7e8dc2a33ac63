package mlnode

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// The Python client's defaults: a reset connection reconnects at once, a restarting server within
// seconds (the delay grows with each attempt).
const (
	DefaultSubscribeRetries    = 5
	DefaultSubscribeRetryDelay = 500 * time.Millisecond
)

// Subscription says where SubscribeArtifacts starts and how it resumes.
type Subscription struct {
	// RoundID: "" is the running round, else the most recent one. Either way the subscription is
	// pinned to the round of its first message, so a resume never lands in a round started since.
	RoundID string
	// AfterSequence: batches with a larger sequence are sent; 0: from the first one still buffered.
	AfterSequence int64
	// MaxRetries bounds the reconnects in a row (a message received starts the count again, so a
	// long round survives many separate drops); 0: DefaultSubscribeRetries; negative: none.
	MaxRetries int
	// RetryDelay times the attempt number is the wait before a reconnect; 0: DefaultSubscribeRetryDelay.
	RetryDelay time.Duration
	// OnRetry, when set, is told of each reconnect before its wait: why the stream ended, and the
	// attempt number (1-based).
	OnRetry func(err error, attempt int)
}

// SubscribeArtifacts hands a round's artifact events to handle (batches, ArtifactsLost, and last
// the SubscriptionEnd) and returns nil after the end, or when handle returns ErrStop.
//
// SubscribeArtifacts is resumable by contract: when the connection drops (UNAVAILABLE without a
// server reason, or a stream closed before its SubscriptionEnd), it reconnects after the last
// sequence received, on the same round, so handle sees every batch still in the server's buffer
// once, and an ArtifactsLost for any that left it. The server's own errors (NOT_FOUND, SHUTTING_DOWN,
// ...) are returned at once: reconnecting does not change them.
func (c *Client) SubscribeArtifacts(ctx context.Context, subscription Subscription, handle func(*mlnodev1.SubscribeArtifactsResponse) error) error {
	cursor := newCursor(subscription)
	for {
		finished, err := c.subscribeOnce(ctx, cursor, handle)
		if finished || ctx.Err() != nil || !isDroppedConnection(err) || cursor.failures >= cursor.maxRetries {
			return err
		}
		cursor.failures++
		if subscription.OnRetry != nil {
			subscription.OnRetry(err, cursor.failures)
		}
		// Linear back-off: a reset connection needs no wait, a restarting server seconds.
		timer := time.NewTimer(cursor.retryDelay * time.Duration(cursor.failures))
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
	}
}

// subscribeOnce runs one SubscribeArtifacts call. finished: the subscription is over (err is its
// result); otherwise err says why the stream broke.
func (c *Client) subscribeOnce(ctx context.Context, cursor *cursor, handle func(*mlnodev1.SubscribeArtifactsResponse) error) (finished bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Poc.SubscribeArtifacts(ctx, &mlnodev1.SubscribeArtifactsRequest{RoundId: cursor.roundID, AfterSequence: cursor.afterSequence})
	if err != nil {
		return false, err
	}
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			// The server always sends a SubscriptionEnd: something on the way (a proxy) cut the stream.
			return false, status.Error(codes.Unavailable, "mlnode: the subscription stream closed before its SubscriptionEnd")
		}
		if err != nil {
			return false, err
		}
		cursor.saw(response)
		if err := handle(response); err != nil {
			return true, handled(err)
		}
		if response.GetEnd() != nil {
			return true, nil
		}
	}
}

// cursor is where a subscription resumes.
type cursor struct {
	roundID       string
	afterSequence int64
	maxRetries    int
	retryDelay    time.Duration
	failures      int // reconnects since the last message
}

func newCursor(s Subscription) *cursor {
	c := &cursor{roundID: s.RoundID, afterSequence: s.AfterSequence, maxRetries: s.MaxRetries, retryDelay: s.RetryDelay}
	if c.maxRetries == 0 {
		c.maxRetries = DefaultSubscribeRetries
	}
	if c.retryDelay == 0 {
		c.retryDelay = DefaultSubscribeRetryDelay
	}
	return c
}

func (c *cursor) saw(response *mlnodev1.SubscribeArtifactsResponse) {
	if response.GetRoundId() != "" {
		c.roundID = response.GetRoundId()
	}
	if batch := response.GetBatch(); batch != nil {
		c.afterSequence = batch.GetSequence()
	}
	// Past a lost range: resuming inside it would only be told of the same loss again.
	if lost := response.GetLost(); lost != nil && lost.GetLastMissingSequence() > c.afterSequence {
		c.afterSequence = lost.GetLastMissingSequence()
	}
	c.failures = 0
}

// isDroppedConnection: UNAVAILABLE without a server reason is the transport's (reset, peer gone);
// the server's own UNAVAILABLE answers carry a reason (SHUTTING_DOWN, ENGINE_DEAD).
func isDroppedConnection(err error) bool {
	d := DecodeError(err)
	return d != nil && d.Code == codes.Unavailable && d.Reason == ""
}
