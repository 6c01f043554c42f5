// Package appprobe runs, inside the sidecar, the application's own liveness, readiness and startup
// probes that injection moved off a redirected port.
//
// Why: the kubelet probes pod-IP:port from the node, so a tcpSocket or httpGet probe on a port that
// Stormgate intercepts would test Stormgate, not the provider (a tcpSocket probe on 20880 passes while
// the provider is dead; an httpGet probe fails because Stormgate speaks Dubbo). Injection rewrites each
// such probe into `httpGet: {port: <metrics port>, path: /app-health/<container>/<livez|readyz|startupz>}`
// and hands the original to the sidecar in the STORMGATE_APP_PROBES environment variable; the sidecar
// serves those paths on its metrics listener by running the original probe against 127.0.0.1, which
// the redirect rules never touch. Istio rewrites probes the same way.
//
// Concurrency: a Handler is immutable after NewHandler and serves requests concurrently.
package appprobe

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// EnvVar carries the probes (JSON of a Set) from the injected manifest to the sidecar.
const EnvVar = "STORMGATE_APP_PROBES"

// PathPrefix starts every rewritten probe's path.
const PathPrefix = "/app-health/"

// Probe kinds, as they appear in the rewritten probe's path.
const (
	Liveness  = "livez"
	Readiness = "readyz"
	Startup   = "startupz"
)

// Probe is one application probe, in the shape of a Kubernetes probe handler with numeric ports
// (named ports are resolved at injection time).
type Probe struct {
	HTTPGet        *HTTPGet   `json:"httpGet,omitempty"`
	TCPSocket      *TCPSocket `json:"tcpSocket,omitempty"`
	TimeoutSeconds int32      `json:"timeoutSeconds,omitempty"` // 0 means 1, the kubelet's default
}

// HTTPGet is an HTTP probe against 127.0.0.1:Port.
type HTTPGet struct {
	Path        string   `json:"path,omitempty"`
	Port        int      `json:"port"`
	Scheme      string   `json:"scheme,omitempty"` // HTTP (default) or HTTPS
	HTTPHeaders []Header `json:"httpHeaders,omitempty"`
}

// Header is one request header of an HTTP probe.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// TCPSocket is a probe that passes when 127.0.0.1:Port accepts a connection.
type TCPSocket struct {
	Port int `json:"port"`
}

// Path returns the URL path that stands for container's probe of kind (Liveness, Readiness, Startup).
func Path(container, kind string) string { return PathPrefix + container + "/" + kind }

// Set holds the probes by Path.
type Set map[string]Probe

// Encode returns s as the JSON the sidecar reads (keys sorted, so the same set always gives the same
// manifest).
func (s Set) Encode() (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// Parse reads a Set from the JSON in EnvVar and checks every probe; an empty string is an empty Set.
func Parse(s string) (Set, error) {
	set := Set{}
	if strings.TrimSpace(s) == "" {
		return set, nil
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(&set); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvVar, err)
	}
	for path, p := range set {
		if err := p.check(path); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvVar, err)
		}
	}
	return set, nil
}

func (p Probe) check(path string) error {
	if !strings.HasPrefix(path, PathPrefix) {
		return fmt.Errorf("probe path %q does not start with %s", path, PathPrefix)
	}
	switch {
	case (p.HTTPGet == nil) == (p.TCPSocket == nil):
		return fmt.Errorf("probe %s: exactly one of httpGet and tcpSocket must be set", path)
	case p.HTTPGet != nil && (p.HTTPGet.Port < 1 || p.HTTPGet.Port > 65535):
		return fmt.Errorf("probe %s: port %d is not 1-65535", path, p.HTTPGet.Port)
	case p.HTTPGet != nil && p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != "HTTP" && p.HTTPGet.Scheme != "HTTPS":
		return fmt.Errorf("probe %s: scheme %q is not HTTP or HTTPS", path, p.HTTPGet.Scheme)
	case p.TCPSocket != nil && (p.TCPSocket.Port < 1 || p.TCPSocket.Port > 65535):
		return fmt.Errorf("probe %s: port %d is not 1-65535", path, p.TCPSocket.Port)
	case p.TimeoutSeconds < 0:
		return fmt.Errorf("probe %s: timeoutSeconds %d is negative", path, p.TimeoutSeconds)
	}
	return nil
}

// Handler serves GET PathPrefix... by running the matching probe against 127.0.0.1: 200 when it passes,
// 503 with the reason when it fails, 404 for a path it does not know.
type Handler struct {
	probes Set
	host   string // where the application listens; "127.0.0.1"
}

// NewHandler returns a Handler for set.
func NewHandler(set Set) *Handler { return &Handler{probes: set, host: "127.0.0.1"} }

// Len returns how many probes h runs.
func (h *Handler) Len() int { return len(h.probes) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := h.probes[r.URL.Path]
	if !ok {
		http.Error(w, "no application probe at "+r.URL.Path, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	what, err := h.run(ctx, p)
	if err != nil {
		http.Error(w, "application probe failed: "+what+": "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok: "+what)
}

func (h *Handler) run(ctx context.Context, p Probe) (string, error) {
	if p.TCPSocket != nil {
		addr := net.JoinHostPort(h.host, strconv.Itoa(p.TCPSocket.Port))
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return "tcp " + addr, err
		}
		c.Close()
		return "tcp " + addr, nil
	}
	g := p.HTTPGet
	scheme := "http"
	if g.Scheme == "HTTPS" {
		scheme = "https"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u := scheme + "://" + net.JoinHostPort(h.host, strconv.Itoa(g.Port)) + path
	what := "GET " + u
	if _, err := url.Parse(u); err != nil {
		return what, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return what, err
	}
	req.Header.Set("User-Agent", "stormgate-app-probe")
	for _, hd := range g.HTTPHeaders {
		if strings.EqualFold(hd.Name, "Host") {
			req.Host = hd.Value
			continue
		}
		req.Header.Add(hd.Name, hd.Value)
	}
	client := &http.Client{
		// As the kubelet: certificates are not verified, redirects count as success.
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // what the kubelet does for probes
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return what, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return what, errors.New("status " + resp.Status)
	}
	return what + ": " + resp.Status, nil
}
