"""Other nodes' nonces recomputed (ComputeArtifacts) and judged (ValidatePocArtifacts)."""
