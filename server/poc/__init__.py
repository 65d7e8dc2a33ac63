"""The server side of Proof-of-Compute: a round's artifact batches, their fan-out to gRPC subscribers, and
their delivery to the network's API node (HTTP callbacks out of a durable store that survives restarts and kills)."""
