"""The server side of Proof-of-Compute: a round's artifact batches, their fan-out to gRPC subscribers, and
their delivery to the network's API node (HTTP callbacks, with a spool for what the process could not send)."""
