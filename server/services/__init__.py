"""The gRPC services on the engine: Inference, Validation (inference replays and PoC artifact checks) and how their outputs are encoded."""
