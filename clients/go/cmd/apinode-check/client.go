package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// NodeClient calls an ML node's management API as the API node does: a 15-minute timeout, every status >= 400 an
// error, and the management POSTs (stop, inference/up) sent without a Content-Type.
type NodeClient struct {
	base string
	http *http.Client
}

func newNodeClient(base string) *NodeClient {
	return &NodeClient{base: base, http: &http.Client{Timeout: 15 * time.Minute}}
}

// HTTPError is a status >= 400, with the node's error body when it sent one.
type HTTPError struct {
	Status int
	Body   ErrorBody
	Raw    string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Raw)
}

func (c *NodeClient) State(ctx context.Context) (StateResponse, error) {
	var state StateResponse
	return state, c.call(ctx, http.MethodGet, "/api/v1/state", nil, "", &state)
}

func (c *NodeClient) Versions(ctx context.Context) (VersionsResponse, error) {
	var versions VersionsResponse
	return versions, c.call(ctx, http.MethodGet, "/api/v1/versions", nil, "", &versions)
}

func (c *NodeClient) Stop(ctx context.Context) (StatusResponse, error) {
	var answer StatusResponse
	return answer, c.call(ctx, http.MethodPost, "/api/v1/stop", nil, "", &answer)
}

func (c *NodeClient) InferenceUp(ctx context.Context, request InferenceUpRequest) (StatusResponse, error) {
	var answer StatusResponse
	return answer, c.call(ctx, http.MethodPost, "/api/v1/inference/up", request, "", &answer)
}

func (c *NodeClient) InitGenerate(ctx context.Context, request PoCInitGenerateRequestV2) (InitGenerateResponse, error) {
	var answer InitGenerateResponse
	return answer, c.call(ctx, http.MethodPost, "/api/v1/inference/pow/init/generate", request, "application/json", &answer)
}

func (c *NodeClient) Generate(ctx context.Context, request PoCGenerateRequestV2) (GenerateQueued, error) {
	var answer GenerateQueued
	return answer, c.call(ctx, http.MethodPost, "/api/v1/inference/pow/generate", request, "application/json", &answer)
}

func (c *NodeClient) PowStatus(ctx context.Context) (PowStatusResponse, error) {
	var answer PowStatusResponse
	return answer, c.call(ctx, http.MethodGet, "/api/v1/inference/pow/status", nil, "", &answer)
}

func (c *NodeClient) PowStop(ctx context.Context) (PowStopResponse, error) {
	var answer PowStopResponse
	return answer, c.call(ctx, http.MethodPost, "/api/v1/inference/pow/stop", struct{}{}, "application/json", &answer)
}

// Health is GET /health: nil on 200.
func (c *NodeClient) Health(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/health", nil, "", nil)
}

func (c *NodeClient) Clock(ctx context.Context) (ClockReading, error) {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/clock", nil)
	if err != nil {
		return ClockReading{}, err
	}
	response, err := c.http.Do(request)
	if err != nil {
		return ClockReading{}, err
	}
	defer response.Body.Close()
	if response.StatusCode != http.StatusNoContent {
		return ClockReading{}, fmt.Errorf("clock: HTTP %d, want 204", response.StatusCode)
	}
	recv, err := strconv.ParseInt(response.Header.Get("X-Server-Recv-Ns"), 10, 64)
	if err != nil {
		return ClockReading{}, fmt.Errorf("clock: X-Server-Recv-Ns: %w", err)
	}
	send, err := strconv.ParseInt(response.Header.Get("X-Server-Send-Ns"), 10, 64)
	if err != nil {
		return ClockReading{}, fmt.Errorf("clock: X-Server-Send-Ns: %w", err)
	}
	return ClockReading{RecvNs: recv, SendNs: send}, nil
}

// Send posts a raw body (what a typed request cannot say: a wrong type) and decodes a 2xx answer into out.
func (c *NodeClient) Send(ctx context.Context, method, path string, raw []byte, out interface{}) error {
	return c.do(ctx, method, path, bytes.NewReader(raw), "application/json", out)
}

// call sends body as JSON (none when nil), with the Content-Type given ("": none, as the API node's management
// POSTs), and decodes a 2xx answer into out (when not nil).
func (c *NodeClient) call(ctx context.Context, method, path string, body interface{}, contentType string, out interface{}) error {
	var reader io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(encoded)
	}
	return c.do(ctx, method, path, reader, contentType, out)
}

func (c *NodeClient) do(ctx context.Context, method, path string, body io.Reader, contentType string, out interface{}) error {
	request, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if contentType != "" {
		request.Header.Set("Content-Type", contentType)
	}
	response, err := c.http.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	raw, err := io.ReadAll(response.Body)
	if err != nil {
		return err
	}
	if response.StatusCode >= 400 {
		failure := &HTTPError{Status: response.StatusCode, Raw: string(raw)}
		if err := json.Unmarshal(raw, &failure.Body); err != nil {
			failure.Raw = "not a JSON error body: " + failure.Raw
		}
		return failure
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer does not decode: %w (%s)", method, path, err, raw)
	}
	return nil
}
