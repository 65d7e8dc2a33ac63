package mlnode

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/ioutil"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Option configures Dial.
type Option func(*settings) error

type settings struct {
	keepalive       time.Duration
	maxRequestBytes int
	tls             *tls.Config // nil: plaintext
	token           string
	tokenWithoutTLS bool
	serviceConfig   string
}

// TLSFiles names the PEM files of a TLS connection.
type TLSFiles struct {
	// CAFile holds the roots that verify the server's certificate; empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's certificate and key for mutual TLS: both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; empty: the target's host.
	ServerName string
}

// WithTLS connects over TLS (mutual TLS when files name a client certificate).
func WithTLS(files TLSFiles) Option {
	return func(s *settings) error {
		config := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: files.ServerName}
		if files.CAFile != "" {
			pem, err := ioutil.ReadFile(files.CAFile)
			if err != nil {
				return fmt.Errorf("mlnode: CA file: %w", err)
			}
			config.RootCAs = x509.NewCertPool()
			if !config.RootCAs.AppendCertsFromPEM(pem) {
				return fmt.Errorf("mlnode: no PEM certificate in CA file %s", files.CAFile)
			}
		}
		if (files.CertFile == "") != (files.KeyFile == "") {
			return errors.New("mlnode: a client certificate needs both its certificate and its key file")
		}
		if files.CertFile != "" {
			pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
			if err != nil {
				return fmt.Errorf("mlnode: client certificate: %w", err)
			}
			config.Certificates = []tls.Certificate{pair}
		}
		s.tls = config
		return nil
	}
}

// WithBearerToken sends `authorization: Bearer <token>` with every call. Dial refuses it over
// plaintext unless AllowTokenWithoutTLS is given too.
func WithBearerToken(token string) Option {
	return func(s *settings) error {
		if token == "" {
			return errors.New("mlnode: empty bearer token")
		}
		s.token = token
		return nil
	}
}

// AllowTokenWithoutTLS lets WithBearerToken's token travel over plaintext, where the path to the
// server is trusted (loopback, or a TLS-terminating proxy beside the client).
func AllowTokenWithoutTLS() Option {
	return func(s *settings) error {
		s.tokenWithoutTLS = true
		return nil
	}
}

// WithKeepalive sets how long the connection stays quiet before the client pings the server. At
// least ServerMinPingInterval: the server closes connections that ping more often.
func WithKeepalive(interval time.Duration) Option {
	return func(s *settings) error {
		if interval < ServerMinPingInterval {
			return fmt.Errorf("mlnode: keepalive %v is below the server's minimum ping interval %v (it would answer GOAWAY too_many_pings)", interval, ServerMinPingInterval)
		}
		s.keepalive = interval
		return nil
	}
}

// WithMaxRequestBytes sets the largest request the client sends: the server's --max-request-mb in
// bytes (GetModelInfoResponse.max_request_bytes), when it is not the default 16 MiB.
func WithMaxRequestBytes(bytes int) Option {
	return func(s *settings) error {
		if bytes <= 0 {
			return fmt.Errorf("mlnode: max request bytes must be positive, got %d", bytes)
		}
		s.maxRequestBytes = bytes
		return nil
	}
}

func (s *settings) transport() grpc.DialOption {
	if s.tls == nil {
		return grpc.WithInsecure()
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(s.tls))
}
