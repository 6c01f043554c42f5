package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ServerTLSConfig names the PEM files the reference control plane serves TLS from.
type TLSConfig struct {
	Cert, Key string // server certificate chain and its private key (required)
	// ClientCA, when set, makes client certificates required and verified against it (mutual TLS): a
	// sidecar without a certificate signed by this CA cannot connect.
	ClientCA string
	// Recheck is how often the files are checked for changes (a rotated certificate is picked up
	// without a restart: cert-manager and the kubelet rewrite Secret files in place). 0 means 10s.
	Recheck time.Duration
}

// ServerCredentials loads cfg and returns the gRPC server option that serves TLS with it (for
// ControlPlaneConfig.ServerOptions). Errors name the file and what is wrong with it.
func Credentials(cfg TLSConfig) (grpc.ServerOption, error) {
	c, err := TLS(cfg)
	if err != nil {
		return nil, err
	}
	return grpc.Creds(credentials.NewTLS(c)), nil
}

// ServerTLS loads cfg and returns a server tls.Config that re-reads the files when they change (the
// admission webhook serves its certificate the same way).
func TLS(cfg TLSConfig) (*tls.Config, error) {
	r, err := newTLSReloader(cfg)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: r.config}, nil
}

// tlsReloader keeps the server's tls.Config current with the files.
type tlsReloader struct {
	cfg TLSConfig

	mu      sync.Mutex
	checked time.Time
	stamp   string // modification times and sizes of the files, to notice a change
	current *tls.Config
}

func newTLSReloader(cfg TLSConfig) (*tlsReloader, error) {
	if cfg.Cert == "" || cfg.Key == "" {
		return nil, errors.New("TLS: both a certificate and a key are needed (--cert and --key)")
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = 10 * time.Second
	}
	r := &tlsReloader{cfg: cfg}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, err
	}
	c, err := loadServerTLS(cfg)
	if err != nil {
		return nil, err
	}
	r.current, r.stamp, r.checked = c, stamp, time.Now()
	return r, nil
}

func (r *tlsReloader) fileStamp() (string, error) {
	var s string
	for _, f := range []string{r.cfg.Cert, r.cfg.Key, r.cfg.ClientCA} {
		if f == "" {
			continue
		}
		st, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS: %w", err)
		}
		s += fmt.Sprintf("%s:%d:%d;", f, st.ModTime().UnixNano(), st.Size())
	}
	return s, nil
}

// config returns the current tls.Config, reloading the files when they changed. A change that does
// not load (a half-written rotation) keeps the previous certificates.
func (r *tlsReloader) config(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < r.cfg.Recheck {
		return r.current, nil
	}
	r.checked = time.Now()
	if stamp, err := r.fileStamp(); err == nil && stamp != r.stamp {
		if c, err := loadServerTLS(r.cfg); err == nil {
			r.current, r.stamp = c, stamp
		}
	}
	return r.current, nil
}

func loadServerTLS(cfg TLSConfig) (*tls.Config, error) {
	kp, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS: certificate %s, key %s: %w", cfg.Cert, cfg.Key, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
	if cfg.ClientCA != "" {
		pem, err := os.ReadFile(cfg.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("TLS: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS: client CA %s: no PEM certificates in it", cfg.ClientCA)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}
