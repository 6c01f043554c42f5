package xds

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type testCert struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func newCert(t *testing.T, name string, parent *testCert, server bool) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	signer, signKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
	} else {
		signer, signKey = parent.cert, parent.key
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCert{c, key, der}
}

func (c *testCert) write(t *testing.T, dir, name string) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	kb, _ := x509.MarshalECPrivateKey(c.key)
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

func TestClientMTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCert(t, "test-ca", nil, false)
	srv := newCert(t, "control-plane", ca, true)
	cli := newCert(t, "sidecar", ca, false)
	caPath, _ := ca.write(t, dir, "ca")
	srvCert, srvKey := srv.write(t, dir, "server")
	cliCert, cliKey := cli.write(t, dir, "client")

	kp, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})

	cp := startReplica(t, "v1", interval(9*time.Second), grpc.Creds(creds))

	noCert := startClient(t, cp.addr, "anon", func(c *ClientConfig) { c.CA = caPath })
	good := startClient(t, cp.addr, "n", func(c *ClientConfig) { c.CA, c.Cert, c.Key = caPath, cliCert, cliKey })
	waitFor(t, 5*time.Second, "mTLS client applied", func() bool { return good.interval() == 9*time.Second })
	time.Sleep(300 * time.Millisecond) // give the certificate-less client the same chance, and more
	if noCert.version() != "" || noCert.connected() != 0 {
		t.Fatal("a client without a certificate got settings from an mTLS control plane")
	}
	// Why, whichever error the client met first: the server's alert, or the broken
	// pipe of a request written while the server was refusing the certificate.
	if e := noCert.c.Status().LastError; !strings.Contains(e, "certificate") {
		t.Fatalf("a client without a certificate: last error %q does not say why", e)
	}

	for _, bad := range []ClientConfig{
		{Addresses: []string{"x:1"}, Node: NodeInfo{ID: "n"}, Cert: cliCert},
		{Addresses: []string{"x:1"}, Node: NodeInfo{ID: "n"}, CA: filepath.Join(dir, "missing.pem")},
		{Addresses: []string{"x:1"}, Node: NodeInfo{ID: "n"}, CA: cliKey},
		{Node: NodeInfo{ID: "n"}},
		{Addresses: []string{"x"}, Node: NodeInfo{ID: "n"}},
		{Addresses: []string{"x:1"}, Node: NodeInfo{ID: ""}},
	} {
		if _, err := NewClient(bad, nil, nil); err == nil {
			t.Errorf("NewClient(%+v) accepted", bad)
		}
	}
}

// TestClientTLSReloadsRotatedFiles: a certificate and CA rotated in place (as
// cert-manager and the kubelet do with a mounted Secret) are used by the next
// handshake without a restart; a rotation that does not load keeps the previous ones.
func TestClientTLSReloadsRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := newCert(t, "ca-1", nil, false), newCert(t, "ca-2", nil, false)
	caPath, _ := ca1.write(t, dir, "ca")
	cliCert, cliKey := newCert(t, "sidecar-1", ca1, false).write(t, dir, "client")
	ct, err := newClientTLS(caPath, cliCert, cliKey, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ct.config("")
	verify := func(server *testCert) error {
		return cfg.VerifyConnection(tls.ConnectionState{ServerName: "127.0.0.1", PeerCertificates: []*x509.Certificate{server.cert}})
	}
	clientCN := func() string {
		c, err := cfg.GetClientCertificate(nil)
		if err != nil || len(c.Certificate) == 0 {
			t.Fatalf("client certificate: %v", err)
		}
		x, _ := x509.ParseCertificate(c.Certificate[0])
		return x.Subject.CommonName
	}
	if err := verify(newCert(t, "cp", ca1, true)); err != nil || clientCN() != "sidecar-1" {
		t.Fatalf("before rotation: verify %v, client %s", err, clientCN())
	}
	// Rotate: a new CA and client certificate, written in place, newer modification times.
	ca2.write(t, dir, "ca")
	newCert(t, "sidecar-2", ca2, false).write(t, dir, "client")
	later := time.Now().Add(time.Minute)
	for _, f := range []string{caPath, cliCert, cliKey} {
		_ = os.Chtimes(f, later, later)
	}
	if err := verify(newCert(t, "cp", ca2, true)); err != nil {
		t.Fatalf("a server signed by the rotated CA: %v", err)
	}
	if err := verify(newCert(t, "cp", ca1, true)); err == nil {
		t.Fatal("a server signed by the old CA still verifies")
	}
	if cn := clientCN(); cn != "sidecar-2" {
		t.Fatalf("client certificate after rotation: %s", cn)
	}
	// A half-written rotation keeps what works.
	if err := os.WriteFile(cliCert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(cliCert, later.Add(time.Minute), later.Add(time.Minute))
	if cn := clientCN(); cn != "sidecar-2" {
		t.Fatalf("after a broken rotation: %s", cn)
	}
}

// The hint a refused client certificate adds to an error that does not say it.
func TestTLSNotesExplain(t *testing.T) {
	pipe := errors.New("write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe")
	var none *tlsNotes
	if got := none.explain(pipe); got != pipe {
		t.Errorf("plaintext: %v", got)
	}
	n := &tlsNotes{}
	if got := n.explain(pipe); got != pipe {
		t.Errorf("no certificate asked for: %v", got)
	}
	n.asked.Store(true)
	if got := n.explain(pipe); !errors.Is(got, pipe) || !strings.Contains(got.Error(), "none is configured: --xds-cert and --xds-key") {
		t.Errorf("asked, none sent: %v", got)
	}
	n.sent.Store(true)
	if got := n.explain(pipe); !strings.Contains(got.Error(), "probably refused the certificate") {
		t.Errorf("asked, sent: %v", got)
	}
	alert := errors.New("remote error: tls: certificate required")
	if got := n.explain(alert); got != alert {
		t.Errorf("an alert that says it already: %v", got)
	}
}
