"""Generated stubs for package mlnode.poc.v1 (`make proto`), the API node's pull stream PoCCallbackStream, from the proto vendored unchanged in protos/vendor/."""
