package mlnode

import (
	"encoding/base64"
	"fmt"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// Artifact is one nonce's PoC vector in the network's form.
type Artifact struct {
	Nonce int64
	// VectorB64 is standard base64 (with padding) of the vector's k float16 values, little-endian:
	// the network's vector_b64, and what ValidatePocArtifacts accepts as a claim.
	VectorB64 string
}

// DecodeArtifacts splits a batch's columns into (nonce, vector_b64) pairs, in the batch's order.
// Each vector's bytes are encoded as they came (no float round trip), so the result is exactly what
// the server produced. An error when the columns disagree.
func DecodeArtifacts(batch *mlnodev1.ArtifactBatch) ([]Artifact, error) {
	k, nonces, vectors := int(batch.GetKDim()), batch.GetNonces(), batch.GetVectors()
	if k < 1 {
		return nil, fmt.Errorf("mlnode: artifact batch %d has k_dim %d", batch.GetSequence(), k)
	}
	width := 2 * k
	if len(vectors) != width*len(nonces) {
		return nil, fmt.Errorf("mlnode: artifact batch %d: %d vector bytes for %d nonces of k_dim %d (want %d)",
			batch.GetSequence(), len(vectors), len(nonces), k, width*len(nonces))
	}
	artifacts := make([]Artifact, len(nonces))
	for i, nonce := range nonces {
		artifacts[i] = Artifact{Nonce: nonce, VectorB64: base64.StdEncoding.EncodeToString(vectors[i*width : (i+1)*width])}
	}
	return artifacts, nil
}
