"""The ML node's HTTP API, as the network's API node calls it (docs/http-api.md): a translation onto the same
objects the gRPC services drive (the round control, the priority gate, the engine instances), in the same process
and event loop."""
