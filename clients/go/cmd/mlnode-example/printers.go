package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
	"github.com/gonka-ai/mlnode-grpc/clients/go/mlnode"
)

// printer shows a Generate stream as its messages arrive.
type printer interface {
	message(*mlnodev1.GenerateResponse)
	// failure shows a failed call and returns the error for the exit status.
	failure(error) error
}

// textPrinter writes the text deltas to stdout, and how each output finished to stderr.
type textPrinter struct{}

func (textPrinter) message(response *mlnodev1.GenerateResponse) {
	fmt.Print(response.GetText())
	if finish := response.GetFinish(); finish != nil {
		fmt.Fprintf(os.Stderr, "\n[output %d: %s, %d tokens]\n", response.GetOutputIndex(), finishReason(finish), finish.GetUsage().GetCompletionTokens())
	}
}

func (textPrinter) failure(err error) error {
	return errors.New(describe(mlnode.DecodeError(err)))
}

// jsonPrinter writes one JSON object a line: a token, a finished output or a failure.
type jsonPrinter struct {
	encoder   *json.Encoder
	positions map[uint32]int // per output: tokens printed so far
}

func newJSONPrinter(w io.Writer) *jsonPrinter {
	return &jsonPrinter{encoder: json.NewEncoder(w), positions: map[uint32]int{}}
}

// Logprobs travel as float32; printed as float64 they read back as exactly the value sent.
type tokenLine struct {
	Output      uint32    `json:"output"`
	Position    int       `json:"position"`
	ID          uint32    `json:"id"`
	Logprob     *float64  `json:"logprob,omitempty"`
	Rank        *uint32   `json:"rank,omitempty"`
	TopIDs      []uint32  `json:"top_ids,omitempty"`
	TopLogprobs []float64 `json:"top_logprobs,omitempty"`
}

type finishLine struct {
	Output           uint32 `json:"output"`
	Finish           string `json:"finish"`
	PromptTokens     uint32 `json:"prompt_tokens"`
	CompletionTokens uint32 `json:"completion_tokens"`
}

type violationJSON struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

type errorJSON struct {
	Code              string            `json:"code"`
	Message           string            `json:"message"`
	Reason            string            `json:"reason,omitempty"`
	Domain            string            `json:"domain,omitempty"`
	Metadata          map[string]string `json:"metadata,omitempty"`
	RetryDelaySeconds *float64          `json:"retry_delay_seconds,omitempty"`
	FieldViolations   []violationJSON   `json:"field_violations,omitempty"`
}

func (p *jsonPrinter) message(response *mlnodev1.GenerateResponse) {
	output, batch := response.GetOutputIndex(), response.GetTokens()
	k := int(batch.GetTopK())
	for i, id := range batch.GetIds() {
		line := tokenLine{Output: output, Position: p.positions[output], ID: id}
		if i < len(batch.GetLogprobs()) {
			logprob, rank := float64(batch.GetLogprobs()[i]), batch.GetRanks()[i]
			line.Logprob, line.Rank = &logprob, &rank
		}
		if k > 0 {
			line.TopIDs = batch.GetTopIds()[i*k : (i+1)*k]
			line.TopLogprobs = widen(batch.GetTopLogprobs()[i*k : (i+1)*k])
		}
		p.positions[output]++
		p.encode(line)
	}
	if finish := response.GetFinish(); finish != nil {
		usage := finish.GetUsage()
		p.encode(finishLine{Output: output, Finish: finishReason(finish), PromptTokens: usage.GetPromptTokens(), CompletionTokens: usage.GetCompletionTokens()})
	}
}

func (p *jsonPrinter) failure(err error) error {
	d := mlnode.DecodeError(err)
	line := errorJSON{Code: codeName(d.Code), Message: d.Message, Reason: d.Reason, Domain: d.Domain, Metadata: d.Metadata}
	if d.HasRetryDelay {
		seconds := d.RetryDelay.Seconds()
		line.RetryDelaySeconds = &seconds
	}
	for _, v := range d.FieldViolations {
		line.FieldViolations = append(line.FieldViolations, violationJSON{Field: v.Field, Description: v.Description})
	}
	p.encode(map[string]errorJSON{"error": line})
	return errors.New(describe(d))
}

func (p *jsonPrinter) encode(value interface{}) {
	if err := p.encoder.Encode(value); err != nil {
		fmt.Fprintln(os.Stderr, "mlnode-example: writing stdout:", err)
		os.Exit(1)
	}
}

func widen(values []float32) []float64 {
	wide := make([]float64, len(values))
	for i, v := range values {
		wide[i] = float64(v)
	}
	return wide
}

// finishReason is the reason's name as the Python client spells it: "stop", "length", ...
func finishReason(finish *mlnodev1.Finish) string {
	return strings.ToLower(strings.TrimPrefix(finish.GetReason().String(), "FINISH_REASON_"))
}

// codeNames are the status codes' canonical names (INVALID_ARGUMENT, not grpc-go's
// InvalidArgument), as gRPC's other languages print them.
var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func codeName(code codes.Code) string {
	if int(code) < len(codeNames) {
		return codeNames[code]
	}
	return code.String()
}

// describe is a failure in one line for people.
func describe(d *mlnode.ErrorDetails) string {
	text := codeName(d.Code) + ": " + d.Message
	var notes []string
	if d.Reason != "" {
		notes = append(notes, "reason "+d.Reason)
	}
	for _, v := range d.FieldViolations {
		notes = append(notes, "field "+v.Field)
	}
	if d.HasRetryDelay {
		notes = append(notes, "retry after "+d.RetryDelay.Round(time.Millisecond).String())
	}
	if len(notes) > 0 {
		text += " (" + strings.Join(notes, ", ") + ")"
	}
	return text
}
