package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/e2e/testcerts"
	"github.com/stormgate/stormgate/xds"
)

// TestControlPlaneServesMTLSFromFiles: the reference control plane serves mutual TLS from PEM files
// (what `sidecar control-plane --cert --key --client-ca` passes): a sidecar with the right CA and a
// client certificate gets its settings; one without a certificate, or trusting another CA, gets
// nothing. Rewriting the files (a certificate rotation) takes effect for new connections without a
// restart.
func TestControlPlaneServesMTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "ca")
	other := testcerts.NewCA(t, dir, "other-ca")
	caPath, otherPath := ca.Path, other.Path
	srvCert, srvKey := ca.Server(t, dir, "server", "127.0.0.1")
	cliCert, cliKey := ca.Client(t, dir, "client")

	opt, err := Credentials(TLSConfig{Cert: srvCert, Key: srvKey, ClientCA: caPath, Recheck: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cp.yaml")
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 9s}\n")
	cp := startCP(t, "127.0.0.1:0", path, opt)

	good := startClient(t, cp.addr, "good", func(c *xds.ClientConfig) { c.CA, c.Cert, c.Key = caPath, cliCert, cliKey })
	noCert := startClient(t, cp.addr, "anon", func(c *xds.ClientConfig) { c.CA = caPath })
	wrongCA := startClient(t, cp.addr, "wrong-ca", func(c *xds.ClientConfig) { c.CA, c.Cert, c.Key = otherPath, cliCert, cliKey })
	plain := startClient(t, cp.addr, "plain", func(c *xds.ClientConfig) {})
	waitFor(t, 5*time.Second, "mTLS client applied", func() bool { return good.interval() == 9*time.Second })
	time.Sleep(300 * time.Millisecond) // the others had the same chance, and more
	for name, c := range map[string]*runningClient{"no certificate": noCert, "wrong CA": wrongCA, "plaintext": plain} {
		if c.version() != "" || c.connected() != 0 {
			t.Errorf("a client with %s got settings from an mTLS control plane", name)
		}
	}

	// Rotation: the server's certificate is now signed by the other CA.
	rotCert, rotKey := other.Server(t, t.TempDir(), "server2", "127.0.0.1")
	copyFile(t, rotCert, srvCert)
	copyFile(t, rotKey, srvKey)
	rotated := startClient(t, cp.addr, "rotated", func(c *xds.ClientConfig) { c.CA, c.Cert, c.Key = otherPath, cliCert, cliKey })
	waitFor(t, 5*time.Second, "client trusting the new CA applied", func() bool { return rotated.interval() == 9*time.Second })

	for _, bad := range []TLSConfig{
		{Cert: srvCert},
		{Cert: srvCert, Key: filepath.Join(dir, "missing.key")},
		{Cert: srvCert, Key: srvKey, ClientCA: srvKey},
	} {
		if _, err := Credentials(bad); err == nil || !strings.Contains(err.Error(), "TLS: ") {
			t.Errorf("Credentials(%+v): %v", bad, err)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
