package mlnode

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// fallbackRetryDelay is the wait when a POC_IN_PROGRESS error carries no RetryInfo (the server
// always sends one; this only bounds a misbehaving proxy's answer).
const fallbackRetryDelay = time.Second

// RetryWhilePoc calls call until it returns anything but UNAVAILABLE with reason POC_IN_PROGRESS
// (inference held off while a mining round runs), waiting the server's RetryInfo delay between
// attempts, at most maxAttempts calls in all. It returns the last call's error, also when ctx ends
// during a wait or its deadline would pass before the next attempt.
//
// The server refuses with POC_IN_PROGRESS before any response message, so call may be a whole
// Generate stream: nothing was delivered by a refused attempt. A stream cut by a round that starts
// mid-way ends with POC_PREEMPTED instead, which this does not retry (its tokens were delivered).
func RetryWhilePoc(ctx context.Context, maxAttempts int, call func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := call(ctx)
		details := DecodeError(err)
		if err == nil || attempt >= maxAttempts || details.Code != codes.Unavailable || !details.HasReason(mlnodev1.ErrorReason_POC_IN_PROGRESS) {
			return err
		}
		delay := fallbackRetryDelay
		if details.HasRetryDelay {
			delay = details.RetryDelay
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
			return err
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
	}
}
