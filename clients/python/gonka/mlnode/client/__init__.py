"""Python client for the Gonka ML node gRPC server.

from gonka.mlnode.client import InferenceClient
with InferenceClient("127.0.0.1:50051") as client:
    result = client.generate(messages=[("user", "Hello")], max_tokens=32, include_text=True)
    print(result.first.text)
"""

from gonka.mlnode.client.artifacts import batch_b64, batch_vectors, claims_from_json, claims_to_json, decode_batch
from gonka.mlnode.client.client import DEFAULT_TARGET, AsyncInferenceClient, InferenceClient
from gonka.mlnode.client.connection import TlsConfig, auth_token_from
from gonka.mlnode.client.errors import ServerError
from gonka.mlnode.client.poc import POC_SERVICE, AsyncPocClient, PocClient
from gonka.mlnode.client.requests import build_request
from gonka.mlnode.client.results import Generation, Output, TokenLogprobs
from gonka.mlnode.client.validation import inference_item

__all__ = [
    "DEFAULT_TARGET",
    "POC_SERVICE",
    "AsyncInferenceClient",
    "AsyncPocClient",
    "Generation",
    "InferenceClient",
    "Output",
    "PocClient",
    "ServerError",
    "TlsConfig",
    "TokenLogprobs",
    "auth_token_from",
    "batch_b64",
    "batch_vectors",
    "build_request",
    "claims_from_json",
    "claims_to_json",
    "decode_batch",
    "inference_item",
]
