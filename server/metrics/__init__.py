"""The Prometheus endpoint (--metrics-port): vLLM's engine metrics, per-RPC metrics and PoC rounds."""
