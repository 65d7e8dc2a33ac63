package mlnode

import (
	"reflect"
	"testing"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

func TestDecodeArtifactsGivesTheNetworksBase64PerNonce(t *testing.T) {
	// float16 little-endian: 1.0 is 0x3C00, -2.0 is 0xC000, 0.5 is 0x3800, 65504 (max) is 0x7BFF.
	batch := &mlnodev1.ArtifactBatch{
		Sequence: 3,
		Nonces:   []int64{7, -1},
		KDim:     2,
		Vectors:  []byte{0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38, 0xFF, 0x7B},
	}
	got, err := DecodeArtifacts(batch)
	if err != nil {
		t.Fatal(err)
	}
	// Python: base64.b64encode(np.array([1, -2], "<f2").tobytes()) == b"ADwAwA=="
	want := []Artifact{{Nonce: 7, VectorB64: "ADwAwA=="}, {Nonce: -1, VectorB64: "ADj/ew=="}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestDecodeArtifactsRefusesColumnsThatDisagree(t *testing.T) {
	for name, batch := range map[string]*mlnodev1.ArtifactBatch{
		"short vectors": {Nonces: []int64{1, 2}, KDim: 2, Vectors: make([]byte, 6)},
		"long vectors":  {Nonces: []int64{1}, KDim: 2, Vectors: make([]byte, 5)},
		"no k_dim":      {Nonces: []int64{1}, Vectors: make([]byte, 4)},
	} {
		if artifacts, err := DecodeArtifacts(batch); err == nil {
			t.Errorf("%s: decoded %v; want an error", name, artifacts)
		}
	}
	if artifacts, err := DecodeArtifacts(&mlnodev1.ArtifactBatch{KDim: 12}); err != nil || len(artifacts) != 0 {
		t.Errorf("an empty batch: %v, %v; want no artifacts and no error", artifacts, err)
	}
}
