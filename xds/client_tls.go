package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// clientTLS keeps the sidecar's TLS material to the control plane current with its
// files: cert-manager and the kubelet rewrite a mounted Secret in place when they
// rotate a certificate, and a connection made after that must use the new one, not
// the one read at start (a restart should not be the way to renew a certificate).
// Each handshake checks the files at most every recheck; a change that does not load
// (a half-written rotation) keeps the previous material.
type clientTLS struct {
	ca, cert, key string
	recheck       time.Duration

	mu      sync.Mutex
	checked time.Time
	stamp   string
	roots   *x509.CertPool
	pair    *tls.Certificate
}

func newClientTLS(ca, cert, key string, recheck time.Duration) (*clientTLS, error) {
	if (cert == "") != (key == "") {
		return nil, errors.New("xds client: a client certificate needs both cert and key")
	}
	c := &clientTLS{ca: ca, cert: cert, key: key, recheck: recheck}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *clientTLS) fileStamp() (string, error) {
	var s string
	for _, f := range []string{c.ca, c.cert, c.key} {
		if f == "" {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%s:%d:%d;", f, st.ModTime().UnixNano(), st.Size())
	}
	return s, nil
}

// load reads the files; called with mu held or before c is shared.
func (c *clientTLS) load() error {
	stamp, err := c.fileStamp()
	if err != nil {
		return fmt.Errorf("xds client: TLS: %w", err)
	}
	var roots *x509.CertPool
	if c.ca != "" {
		pem, err := os.ReadFile(c.ca)
		if err != nil {
			return fmt.Errorf("xds client: CA: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("xds client: CA %s: no PEM certificates", c.ca)
		}
	}
	var pair *tls.Certificate
	if c.cert != "" {
		kp, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return fmt.Errorf("xds client: client certificate: %w", err)
		}
		pair = &kp
	}
	c.roots, c.pair, c.stamp, c.checked = roots, pair, stamp, time.Now()
	return nil
}

// current returns the material, reloading it when the files changed.
func (c *clientTLS) current() (*x509.CertPool, *tls.Certificate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) >= c.recheck {
		c.checked = time.Now()
		if stamp, err := c.fileStamp(); err == nil && stamp != c.stamp {
			_ = c.load() // on failure the previous material stays
		}
	}
	return c.roots, c.pair
}

// config is the tls.Config for the control-plane connection. The server is verified
// against the current CA in VerifyConnection (tls.Config's RootCAs would be fixed at
// start); without a CA the system roots apply.
func (c *clientTLS) config(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		// Verification is done below, against the current roots, with the same checks.
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies the chain and the name
		VerifyConnection: func(cs tls.ConnectionState) error {
			roots, _ := c.current()
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: the control plane sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if _, pair := c.current(); pair != nil {
				return pair, nil
			}
			return &tls.Certificate{}, nil // none configured: the server decides
		},
	}
}
