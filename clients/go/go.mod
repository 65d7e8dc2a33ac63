// The Go client of the gonka ML node's gRPC API: generated stubs (gonka/mlnode/v1), a thin helper
// (mlnode) and an example command (cmd/mlnode-example).
//
// The requirements are the upstream releases of what Debian 12 ships, which `make test` builds
// against offline (GOPATH mode): grpc 1.33.3, protobuf 1.28.1, golang/protobuf 1.5.2. genproto is
// the version grpc 1.33.3 itself requires: minimal version selection picks it over Debian's older
// snapshot (v0.0.0-20200413115906-b5235f65be36, with the same errdetails API).
// `go 1.16`: the module lists its direct requirements only; make test compiles the code with
// -lang=go1.16 to hold it to that. There is no go.sum (it cannot be produced offline): run
// `go mod tidy` once to write it.
module github.com/gonka-ai/mlnode-grpc/clients/go

go 1.16

require (
	github.com/golang/protobuf v1.5.2 // indirect
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
