package mlnode

import (
	"context"
	"io/ioutil"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	mlnodev1 "github.com/gonka-ai/mlnode-grpc/clients/go/gonka/mlnode/v1"
)

// callRecorder is a server interceptor noting the authorization header and the client
// certificate's name of the last call.
type callRecorder struct {
	mu            sync.Mutex
	authorization string
	clientName    string
}

func (r *callRecorder) intercept(ctx context.Context, req interface{}, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (interface{}, error) {
	r.mu.Lock()
	md, _ := metadata.FromIncomingContext(ctx)
	r.authorization = strings.Join(md.Get("authorization"), ",")
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			r.clientName = info.State.PeerCertificates[0].Subject.CommonName
		}
	}
	r.mu.Unlock()
	return handler(ctx, req)
}

func (r *callRecorder) seen() (string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.authorization, r.clientName
}

func TestDialOverMutualTLSWithABearerToken(t *testing.T) {
	pki := newTestPKI(t)
	recorder := &callRecorder{}
	address, _ := serve(t, nil, grpc.Creds(credentials.NewTLS(pki.serverTLS(t))), grpc.UnaryInterceptor(recorder.intercept))
	conn := dial(t, address,
		WithTLS(TLSFiles{CAFile: pki.caFile, CertFile: pki.clientCertFile, KeyFile: pki.clientKeyFile, ServerName: testServerName}),
		WithBearerToken("s3cret"))

	serving, err := ServiceStatus(context.Background(), conn, "")
	if err != nil || serving != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health over mTLS: %v, %v", serving, err)
	}
	if authorization, clientName := recorder.seen(); authorization != "Bearer s3cret" || clientName != "mlnode-client" {
		t.Fatalf("the server saw authorization %q from client %q", authorization, clientName)
	}
}

func TestTLSVerifiesTheServerName(t *testing.T) {
	pki := newTestPKI(t)
	address, _ := serve(t, nil, grpc.Creds(credentials.NewTLS(pki.serverTLS(t))))
	conn := dial(t, address, WithTLS(TLSFiles{CAFile: pki.caFile, CertFile: pki.clientCertFile, KeyFile: pki.clientKeyFile, ServerName: "other.test"}))
	if _, err := ServiceStatus(context.Background(), conn, ""); status.Code(err) != codes.Unavailable {
		t.Fatalf("a certificate for another name must fail the handshake, got %v", err)
	}
}

func TestTokenOverPlaintextNeedsExplicitPermission(t *testing.T) {
	if _, err := Dial(context.Background(), "127.0.0.1:1", WithBearerToken("s3cret")); err == nil || !strings.Contains(err.Error(), "AllowTokenWithoutTLS") {
		t.Fatalf("a token over plaintext must be refused unless allowed, got %v", err)
	}
	recorder := &callRecorder{}
	address, _ := serve(t, nil, grpc.UnaryInterceptor(recorder.intercept))
	conn := dial(t, address, WithBearerToken("s3cret"), AllowTokenWithoutTLS())
	if _, err := ServiceStatus(context.Background(), conn, ""); err != nil {
		t.Fatal(err)
	}
	if authorization, _ := recorder.seen(); authorization != "Bearer s3cret" {
		t.Fatalf("the server saw authorization %q", authorization)
	}
}

func TestKeepaliveBelowTheServersMinimumIsRefused(t *testing.T) {
	if _, err := Dial(context.Background(), "127.0.0.1:1", WithKeepalive(5*time.Second)); err == nil || !strings.Contains(err.Error(), "too_many_pings") {
		t.Fatalf("a 5 s keepalive must be refused, got %v", err)
	}
	conn, err := Dial(context.Background(), "127.0.0.1:1", WithKeepalive(ServerMinPingInterval))
	if err != nil {
		t.Fatalf("the server's minimum itself is allowed: %v", err)
	}
	conn.Close()
}

func TestRequestsAboveTheLimitFailBeforeSending(t *testing.T) {
	fake := &fakeInference{}
	address, _ := serve(t, fake)
	client := mlnodev1.NewInferenceServiceClient(dial(t, address, WithMaxRequestBytes(1024)))
	ctx := context.Background()
	if _, err := client.Abort(ctx, &mlnodev1.AbortRequest{RequestId: strings.Repeat("x", 100)}); err != nil {
		t.Fatalf("a small request: %v", err)
	}
	_, err := client.Abort(ctx, &mlnodev1.AbortRequest{RequestId: strings.Repeat("x", 2000)})
	if status.Code(err) != codes.ResourceExhausted || fake.callCount() != 1 {
		t.Fatalf("a 2000-byte request over a 1024-byte limit: %v, server calls %d; want RESOURCE_EXHAUSTED before sending", err, fake.callCount())
	}
}

func TestUnusableTLSFilesAreRefused(t *testing.T) {
	pki := newTestPKI(t)
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := ioutil.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string]TLSFiles{
		"missing CA file":     {CAFile: filepath.Join(t.TempDir(), "absent.pem")},
		"CA file without PEM": {CAFile: notPEM},
		"certificate, no key": {CertFile: pki.clientCertFile},
		"key of another cert": {CertFile: pki.clientCertFile, KeyFile: pki.serverKeyFile},
	} {
		if _, err := Dial(context.Background(), "127.0.0.1:1", WithTLS(files)); err == nil {
			t.Errorf("%s: Dial accepted it", name)
		}
	}
}
