"""A round's artifacts fanned out to its gRPC subscribers: the hub that numbers them and buffers them within a budget."""
