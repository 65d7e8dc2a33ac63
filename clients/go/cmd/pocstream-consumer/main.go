// Command pocstream-consumer reads an ML node's pull stream mlnode.poc.v1.PoCCallbackStream as the
// network's API node does (its pocstream.Manager, spec section 6), and hands each callback to an HTTP
// handler as the API node hands it to its own:
//
//	pocstream-consumer --target 127.0.0.1:50051 --forward http://127.0.0.1:9100 --idle-exit 10s
//
// For each callback it POSTs the body to {forward}{path} with Content-Type application/json. On 2xx, on
// 4xx, or for a malformed callback, it acknowledges that one id and resumes after it; on 5xx (or when the
// handler cannot be reached) it drops the stream and reconnects, backing off 1 s doubling to 30 s (reset
// once a callback arrives). A stream that ends or fails is reconnected the same way.
//
// It stops on SIGINT/SIGTERM, or after --idle-exit without a callback, and prints one JSON line:
// {"acknowledged": N, "streams": M, "forward_failures": F}. Exit status: 0, or 2 for bad usage.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"

	gen "github.com/gonka-ai/mlnode-grpc/clients/go/pocstream/gen"
)

const (
	firstBackoff   = time.Second
	maxBackoff     = 30 * time.Second
	forwardTimeout = 10 * time.Second
)

// summary is what the command prints when it stops.
type summary struct {
	Acknowledged    int `json:"acknowledged"`
	Streams         int `json:"streams"`
	ForwardFailures int `json:"forward_failures"`
}

// consumer holds one ML node's stream state: where to resume, and how long to wait before reconnecting.
type consumer struct {
	client  gen.PoCCallbackStreamClient
	forward string
	http    *http.Client
	resume  string
	backoff time.Duration
	idle    time.Duration
	// lastCallback: when a callback last arrived (or the command started), for --idle-exit.
	lastCallback time.Time
	result       summary
}

func main() {
	target := flag.String("target", "127.0.0.1:50051", "the ML node's pull-stream address (plaintext gRPC)")
	forward := flag.String("forward", "", "the base URL the callbacks are POSTed under (required)")
	idle := flag.Duration("idle-exit", 0, "stop after this long without a callback (0: run until signalled)")
	flag.Parse()
	if *forward == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	connection, err := grpc.Dial(*target, grpc.WithInsecure())
	if err != nil {
		fmt.Fprintln(os.Stderr, "pocstream-consumer:", err)
		os.Exit(1)
	}
	defer connection.Close()
	c := &consumer{
		client:       gen.NewPoCCallbackStreamClient(connection),
		forward:      *forward,
		http:         &http.Client{Timeout: forwardTimeout},
		backoff:      firstBackoff,
		idle:         *idle,
		lastCallback: time.Now(),
	}
	c.run(ctx)
	line, _ := json.Marshal(c.result)
	fmt.Println(string(line))
}

// run streams until ctx ends or the stream has been idle for c.idle.
func (c *consumer) run(ctx context.Context) {
	for ctx.Err() == nil && !c.idleTooLong() {
		c.stream(ctx)
		if ctx.Err() != nil || c.idleTooLong() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.backoff):
		}
		c.backoff *= 2
		if c.backoff > maxBackoff {
			c.backoff = maxBackoff
		}
	}
}

func (c *consumer) idleTooLong() bool {
	return c.idle > 0 && time.Since(c.lastCallback) >= c.idle
}

// stream reads one stream until it fails, the handler answers 5xx, or the consumer has been idle too long.
func (c *consumer) stream(ctx context.Context) {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.idle > 0 {
		// Wakes the blocked Recv once the idle time has passed without a callback.
		go func() {
			for streamCtx.Err() == nil {
				if c.idleTooLong() {
					cancel()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	c.result.Streams++
	stream, err := c.client.StreamCallbacks(streamCtx, &gen.StreamCallbacksRequest{ResumeAfterId: c.resume})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pocstream-consumer: stream:", err)
		return
	}
	for {
		callback, err := stream.Recv()
		if err != nil {
			if streamCtx.Err() == nil {
				fmt.Fprintln(os.Stderr, "pocstream-consumer: stream ended:", err)
			}
			return
		}
		c.lastCallback = time.Now()
		c.backoff = firstBackoff
		if callback.GetId() != "" && callback.GetPath() != "" {
			status, err := c.post(streamCtx, callback)
			if err != nil || status >= 500 {
				c.result.ForwardFailures++
				fmt.Fprintf(os.Stderr, "pocstream-consumer: %s: status %d, %v: reconnecting\n", callback.GetId(), status, err)
				return
			}
		}
		// 2xx, 4xx or malformed: this one is done.
		if _, err := c.client.AckCallbacks(streamCtx, &gen.AckCallbacksRequest{Ids: []string{callback.GetId()}}); err != nil {
			fmt.Fprintln(os.Stderr, "pocstream-consumer: ack:", err)
			return
		}
		c.result.Acknowledged++
		c.resume = callback.GetId()
	}
}

// post hands one callback to the handler; its HTTP status.
func (c *consumer) post(ctx context.Context, callback *gen.Callback) (int, error) {
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, c.forward+callback.GetPath(), bytes.NewReader(callback.GetBody()))
	if err != nil {
		return 0, err
	}
	request.Header.Set("Content-Type", "application/json")
	response, err := c.http.Do(request)
	if err != nil {
		return 0, err
	}
	defer response.Body.Close()
	return response.StatusCode, nil
}
