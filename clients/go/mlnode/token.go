package mlnode

import "context"

// bearerToken is grpc per-RPC credentials: `authorization: Bearer <token>` on every call.
type bearerToken struct {
	token      string
	requireTLS bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity makes grpc itself refuse to send the token over plaintext, unless the
// caller allowed that with AllowTokenWithoutTLS.
func (b bearerToken) RequireTransportSecurity() bool {
	return b.requireTLS
}
