package mlnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io/ioutil"
	"math/big"
	"path/filepath"
	"testing"
	"time"
)

// testPKI is a CA with a server and a client certificate, written as PEM files.
type testPKI struct {
	caFile                        string
	serverCertFile, serverKeyFile string
	clientCertFile, clientKeyFile string
	caPool                        *x509.CertPool
}

const testServerName = "mlnode.test"

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert := issue(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	pki := testPKI{caFile: filepath.Join(dir, "ca.pem"), caPool: x509.NewCertPool()}
	pki.caPool.AddCert(caCert)
	writePEM(t, pki.caFile, "CERTIFICATE", caCert.Raw)
	pki.serverCertFile, pki.serverKeyFile = issueFiles(t, dir, "server", &x509.Certificate{
		Subject: pkix.Name{CommonName: testServerName}, DNSNames: []string{testServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, caCert, caKey)
	pki.clientCertFile, pki.clientKeyFile = issueFiles(t, dir, "client", &x509.Certificate{
		Subject: pkix.Name{CommonName: "mlnode-client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, caKey)
	return pki
}

// serverTLS requires and verifies a client certificate from the test CA.
func (p testPKI) serverTLS(t *testing.T) *tls.Config {
	pair, err := tls.LoadX509KeyPair(p.serverCertFile, p.serverKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: p.caPool, ClientAuth: tls.RequireAndVerifyClientCert}
}

// issue signs template with parent's key (self-signed when parent is nil).
func issue(t *testing.T, template, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template.SerialNumber = big.NewInt(time.Now().UnixNano())
	template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = template, key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

func issueFiles(t *testing.T, dir, name string, template, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (string, string) {
	key, cert := issue(t, template, ca, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", cert.Raw)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	if err := ioutil.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
