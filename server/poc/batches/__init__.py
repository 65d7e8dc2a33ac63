"""One PoC batch's computation, shared by a mining round and validation: the requests' parameters (callback URLs included), a batch run on one engine, its outcomes and artifacts, and a nonce list spread over the engines."""

# Seconds a recompute batch waits for free KV blocks before it is split (batch_runner): here, where the PoC flags
# (server.poc.options) read it without importing the engine, which the CLI loads only after parsing them.
DEFAULT_BLOCK_WAIT_SECONDS = 2.0
