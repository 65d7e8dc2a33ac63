"""Everything that runs inside or drives the vLLM engine: the vLLM plugin and its seams, the engine
factory, and the pure consensus core (`engine_ext.consensus`). Importable without gRPC."""
