"""Vendored protobuf packages of the network: stubs of protos that are not this project's own contract."""
