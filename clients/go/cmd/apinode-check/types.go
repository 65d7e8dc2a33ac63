package main

// The management API's bodies with the JSON names of the API node's Go client (spec
// ../shared/spec/mlnode-http-api.md section 1; decentralized-api/mlnodeclient). Decoding ignores unknown
// fields, as the API node's does.

// StateResponse is GET /api/v1/state.
type StateResponse struct {
	State                  string `json:"state"`
	Version                string `json:"version"`
	PocValidationInference bool   `json:"poc_validation_inference"`
	PocStatus              string `json:"poc_status"`
	InferenceHealthy       bool   `json:"inference_healthy"`
	LoadedModel            string `json:"loaded_model"`
}

// VersionsResponse is GET /api/v1/versions.
type VersionsResponse struct {
	VllmVersion            string `json:"vllm_version"`
	PocValidationInference bool   `json:"poc_validation_inference"`
}

// InferenceUpRequest is the body of POST /api/v1/inference/up.
type InferenceUpRequest struct {
	Model          string   `json:"model"`
	Dtype          string   `json:"dtype"`
	AdditionalArgs []string `json:"additional_args"`
}

// StatusResponse is the answer of POST /api/v1/stop and /api/v1/inference/up.
type StatusResponse struct {
	Status string `json:"status"`
}

// PoCParams is init/generate's params (extra fields forbidden by the node: k_dim stays out).
type PoCParams struct {
	Model  string `json:"model"`
	SeqLen int64  `json:"seq_len"`
}

// PoCInitGenerateRequestV2 is the body of POST /api/v1/inference/pow/init/generate.
type PoCInitGenerateRequestV2 struct {
	BlockHash      string    `json:"block_hash"`
	BlockHeight    int64     `json:"block_height"`
	PublicKey      string    `json:"public_key"`
	NodeID         int64     `json:"node_id"`
	NodeCount      int64     `json:"node_count"`
	Params         PoCParams `json:"params"`
	URL            string    `json:"url,omitempty"`
	PocStrongerRng bool      `json:"poc_stronger_rng,omitempty"`
}

// BackendResult and BackendError are one backend's outcome in init/generate and pow/stop.
type BackendResult struct {
	Port   int    `json:"port"`
	Status string `json:"status"`
}

type BackendError struct {
	Port  int    `json:"port"`
	Error string `json:"error"`
}

// InitGenerateResponse is init/generate's answer.
type InitGenerateResponse struct {
	Status   string          `json:"status"`
	Backends int             `json:"backends"`
	NGroups  int             `json:"n_groups"`
	Results  []BackendResult `json:"results"`
	Errors   []BackendError  `json:"errors"`
}

// PowStatusResponse is GET /api/v1/inference/pow/status.
type PowStatusResponse struct {
	Status   string `json:"status"`
	Backends []struct {
		Port   int    `json:"port"`
		Status string `json:"status"`
	} `json:"backends"`
}

// PowStopResponse is POST /api/v1/inference/pow/stop.
type PowStopResponse struct {
	Status  string          `json:"status"`
	Results []BackendResult `json:"results"`
	Errors  []BackendError  `json:"errors"`
	Message string          `json:"message,omitempty"`
}

// Artifact is one nonce's artifact, as claimed in a validation job.
type Artifact struct {
	Nonce     int64  `json:"nonce"`
	VectorB64 string `json:"vector_b64"`
}

// StatTest is a validation job's statistical test (the API node omits zeros).
type StatTest struct {
	DistThreshold   float64 `json:"dist_threshold,omitempty"`
	PMismatch       float64 `json:"p_mismatch,omitempty"`
	PValueThreshold float64 `json:"p_value_threshold,omitempty"`
}

// PoCGenerateRequestV2 is the body of POST /api/v1/inference/pow/generate: init/generate's header plus the
// sampled nonces and, for a validation job, the claimed artifacts.
type PoCGenerateRequestV2 struct {
	BlockHash   string    `json:"block_hash"`
	BlockHeight int64     `json:"block_height"`
	PublicKey   string    `json:"public_key"`
	NodeID      int64     `json:"node_id"`
	NodeCount   int64     `json:"node_count"`
	Params      PoCParams `json:"params"`
	Nonces      []int64   `json:"nonces"`
	Validation  *struct {
		Artifacts []Artifact `json:"artifacts"`
	} `json:"validation,omitempty"`
	StatTest       *StatTest `json:"stat_test,omitempty"`
	URL            string    `json:"url,omitempty"`
	PocStrongerRng bool      `json:"poc_stronger_rng,omitempty"`
}

// GenerateQueued is pow/generate's answer.
type GenerateQueued struct {
	Status      string `json:"status"`
	RequestID   string `json:"request_id"`
	QueuedCount int    `json:"queued_count"`
}

// ClockReading is GET /api/v1/clock's two stamps (unix nanoseconds, from its headers).
type ClockReading struct {
	RecvNs int64 `json:"recv_ns"`
	SendNs int64 `json:"send_ns"`
}

// ErrorBody is the node's refusal: {"error": {"message", "type", "param", "code"}}.
type ErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}
