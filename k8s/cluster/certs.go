package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a throw-away certificate authority: one per purpose (the API server's serving and client
// certificates, a webhook's serving certificate), valid for a day.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	PEM     []byte // the CA certificate, PEM: a caBundle or a --client-ca-file
	Path    string // where PEM was written
	dir     string
	serial  int64
	tmplNow time.Time
}

// NewCA creates a CA named cn and writes its certificate to dir/cn.crt.
func NewCA(dir, cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Path: filepath.Join(dir, cn+".crt"), dir: dir, serial: 1, tmplNow: now}
	return ca, os.WriteFile(ca.Path, ca.PEM, 0o600)
}

// Serving issues a TLS server certificate for the given IP addresses and DNS names and writes it
// and its key to dir/name.crt and dir/name.key.
func (ca *CA) Serving(name string, ips []net.IP, dns ...string) (certPath, keyPath string, err error) {
	return ca.issue(name, pkix.Name{CommonName: name}, x509.ExtKeyUsageServerAuth, ips, dns)
}

// Client issues a TLS client certificate whose subject Kubernetes reads as user cn in groups orgs.
func (ca *CA) Client(name, cn string, orgs ...string) (certPath, keyPath string, err error) {
	return ca.issue(name, pkix.Name{CommonName: cn, Organization: orgs}, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (ca *CA) issue(name string, subject pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      subject,
		NotBefore:    ca.tmplNow.Add(-time.Hour),
		NotAfter:     ca.tmplNow.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certPath, keyPath := filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// writeKeyPair writes a fresh key pair for service-account tokens: the private key (PKCS#8) and the
// public key (PKIX), PEM.
func writeKeyPair(priv, pub string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	return os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600)
}
