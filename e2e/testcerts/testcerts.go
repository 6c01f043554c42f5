// Package testcerts makes throwaway X.509 material for tests: a CA and server and client certificates
// it signs, written as PEM files into a directory the test owns (t.TempDir). Keys are generated per
// run (ECDSA P-256) and live for an hour; nothing it writes is ever committed.
//
// Concurrency: a CA may sign from several goroutines.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority; Path is its certificate's PEM file.
type CA struct {
	Path string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA creates a CA named name and writes its certificate to dir/name.crt.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	tmpl := template(name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Path: filepath.Join(dir, name+".crt"), cert: cert, key: key}
	writePEM(t, ca.Path, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for hosts (IP addresses or DNS names) and writes dir/name.crt and
// dir/name.key.
func (ca *CA) Server(t testing.TB, dir, name string, hosts ...string) (certPath, keyPath string) {
	t.Helper()
	tmpl := template(name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(t, dir, name, tmpl)
}

// Client issues a client certificate (for mutual TLS) and writes dir/name.crt and dir/name.key.
func (ca *CA) Client(t testing.TB, dir, name string) (certPath, keyPath string) {
	t.Helper()
	tmpl := template(name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(t, dir, name, tmpl)
}

func (ca *CA) issue(t testing.TB, dir, name string, tmpl *x509.Certificate) (string, string) {
	t.Helper()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "EC PRIVATE KEY", kb)
	return certPath, keyPath
}

func template(name string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"stormgate tests"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writePEM writes one PEM block, readable by everyone: tests hand these files to processes running
// as other users (a container's UID 1337).
func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}
