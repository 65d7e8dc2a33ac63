"""Generated protobuf and gRPC stubs for package gonka.mlnode.v1 (`make proto`)."""
