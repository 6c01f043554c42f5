package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Binaries names the programs a Cluster runs. make k8s-test builds them (k8s/run.sh) and passes
// them in the environment variables of the same names as the fields' tags.
type Binaries struct {
	KubeAPIServer string // STORMGATE_KUBE_APISERVER
	Etcd          string // STORMGATE_ETCD
}

// BinariesFromEnv reads Binaries from the environment. A missing one is an error that says how to
// get it: tests fail with it rather than skip.
func BinariesFromEnv() (Binaries, error) {
	b := Binaries{KubeAPIServer: os.Getenv("STORMGATE_KUBE_APISERVER"), Etcd: os.Getenv("STORMGATE_ETCD")}
	for name, path := range map[string]string{"STORMGATE_KUBE_APISERVER": b.KubeAPIServer, "STORMGATE_ETCD": b.Etcd} {
		if path == "" {
			return b, fmt.Errorf("%s is not set: run the Kubernetes tests with `make k8s-test` (k8s/run.sh builds kube-apiserver and etcd and sets it)", name)
		}
		if _, err := os.Stat(path); err != nil {
			return b, fmt.Errorf("%s: %w (make k8s-test builds it)", name, err)
		}
	}
	return b, nil
}

// ServiceCIDR is the range the API server allocates Service cluster IPs from. Nothing routes it (no
// kube-proxy, no kubelet): it is in the benchmarking range 198.18.0.0/15 so that an address from it
// is never anyone's real host.
const ServiceCIDR = "198.19.255.0/24"

// Cluster is a Kubernetes control plane on loopback: one etcd and one kube-apiserver, each its own
// process, with generated certificates; no kubelet, scheduler or controller manager, so nothing runs
// the pods it stores. Its API server enforces what a real one does at admission: RBAC, the default
// admission plugins (among them ServiceAccount, PodSecurity, MutatingAdmissionWebhook), schema
// validation and defaulting.
//
// Concurrency: the methods are safe to call from any goroutine; Stop once, by the owner.
type Cluster struct {
	Dir        string       // certificates, data and logs
	Config     *rest.Config // the cluster admin (system:masters)
	Client     kubernetes.Interface
	Kubeconfig string // a kubeconfig file for Config
	CA         *CA    // signs the API server's serving certificate and its clients' certificates
	URL        string // https://127.0.0.1:port

	mu    sync.Mutex
	procs []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// Start runs etcd and kube-apiserver under dir and waits (up to ready) until the API server reports
// ready. On error nothing is left running. Logs go to dir/etcd.log and dir/kube-apiserver.log.
func Start(ctx context.Context, bins Binaries, dir string, ready time.Duration) (*Cluster, error) {
	c := &Cluster{Dir: dir}
	if err := c.start(ctx, bins, ready); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, bins Binaries, ready time.Duration) error {
	pki := filepath.Join(c.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	ca, err := NewCA(pki, "cluster-ca")
	if err != nil {
		return err
	}
	c.CA = ca
	loopback := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	srvCert, srvKey, err := ca.Serving("kube-apiserver", loopback, "localhost", "kubernetes.default.svc")
	if err != nil {
		return err
	}
	adminCert, adminKey, err := ca.Client("admin", "stormgate-test-admin", "system:masters")
	if err != nil {
		return err
	}
	saKey, saPub := filepath.Join(pki, "sa.key"), filepath.Join(pki, "sa.pub")
	if err := writeKeyPair(saKey, saPub); err != nil {
		return err
	}

	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdClient := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if _, err := c.run("etcd", bins.Etcd,
		"--name", "stormgate-test",
		"--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", etcdClient, "--advertise-client-urls", etcdClient,
		"--listen-peer-urls", etcdPeer, "--initial-advertise-peer-urls", etcdPeer,
		"--initial-cluster", "stormgate-test="+etcdPeer,
		"--listen-metrics-urls", "",
		// A test cluster's data is thrown away: fsync only slows it down on a shared disk.
		"--unsafe-no-fsync",
		"--log-level", "warn",
	); err != nil {
		return err
	}
	c.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	if _, err := c.run("kube-apiserver", bins.KubeAPIServer,
		"--etcd-servers", etcdClient,
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports[2]),
		"--tls-cert-file", srvCert, "--tls-private-key-file", srvKey,
		"--client-ca-file", ca.Path,
		"--authorization-mode", "Node,RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub,
		"--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", ServiceCIDR,
		// No kubelet: the API server never dials a node, and its own Endpoints need no reconciling.
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
		"--v", "1",
	); err != nil {
		return err
	}

	cfg := &rest.Config{
		Host:            c.URL,
		TLSClientConfig: rest.TLSClientConfig{CAFile: ca.Path, CertFile: adminCert, KeyFile: adminKey},
		QPS:             100, Burst: 200,
	}
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["stormgate-test"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: ca.Path}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: adminCert, ClientKey: adminKey}
	kc.Contexts["stormgate-test"] = &clientcmdapi.Context{Cluster: "stormgate-test", AuthInfo: "admin"}
	kc.CurrentContext = "stormgate-test"
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return err
	}
	return c.waitReady(ctx, ready)
}

// waitReady polls /readyz until it answers 200 or a process exits.
func (c *Cluster) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last string
	for {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil {
			return nil
		}
		last = fmt.Sprintf("%v %s", err, bytes.TrimSpace(body))
		for _, p := range c.procsCopy() {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited (%v) before the API server was ready; its log:\n%s", p.name, p.err, tail(p.log.Name(), 4096))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server was not ready after %v: %s\nkube-apiserver log:\n%s", limit, last, tail(filepath.Join(c.Dir, "kube-apiserver.log"), 4096))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// run starts one process with its output in dir/name.log.
func (c *Cluster) run(name, path string, args ...string) (*proc, error) {
	log, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) procsCopy() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*proc(nil), c.procs...)
}

// Stop ends the API server, then etcd (SIGTERM, then SIGKILL after 10 s), and waits for both.
func (c *Cluster) Stop() {
	ps := c.procsCopy()
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		p.log.Close()
	}
}

// Logs returns the last n bytes of a process's log ("etcd" or "kube-apiserver").
func (c *Cluster) Logs(name string, n int64) string {
	return tail(filepath.Join(c.Dir, name+".log"), n)
}

func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// HTTPClient returns an HTTP client that trusts the cluster's CA (for raw requests).
func (c *Cluster) HTTPClient() (*http.Client, error) {
	return rest.HTTPClientFor(c.Config)
}
