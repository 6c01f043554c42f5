// Package helmchart renders and lints charts/stormgate with Helm's own Go packages (helm.sh/helm/v3,
// the code behind `helm template` and `helm lint`), and splits the rendering into the files of
// deploy/ so that those are generated from the chart: one source.
//
// Concurrency: pure functions of their arguments (the chart directory is read, never written).
package helmchart

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

// Release is the release name deploy/ is rendered as (it only appears in labels: object names are
// fixed, as docs and annotations name them).
const Release = "stormgate"

// Namespace is the namespace deploy/ is rendered for.
const Namespace = "stormgate-system"

// Load reads the chart in dir. Helm warns on stderr about the symbolic links in files/ (they point at
// deploy/prometheus and deploy/grafana, the sources of the alert rules and the dashboard): silenced.
func Load(dir string) (*chart.Chart, error) {
	defer quietLog()()
	return loader.Load(dir)
}

func quietLog() func() {
	w := log.Writer()
	log.SetOutput(io.Discard)
	return func() { log.SetOutput(w) }
}

// ValuesFile reads a values file.
func ValuesFile(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v := map[string]any{}
	return v, yaml.Unmarshal(b, &v)
}

// Template is `helm template RELEASE DIR --namespace NS --values ...`: the manifest Helm would
// install, documents in Helm's install order, each after a "# Source:" line.
func Template(dir, release, namespace string, values map[string]any) (string, error) {
	ch, err := Load(dir)
	if err != nil {
		return "", err
	}
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	in := action.NewInstall(cfg)
	in.DryRun, in.ClientOnly, in.Replace, in.IncludeCRDs = true, true, true, true
	in.ReleaseName, in.Namespace = release, namespace
	in.KubeVersion = kubeVersion()
	rel, err := in.Run(ch, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// Lint is `helm lint DIR --values ... --namespace NS --strict`: every message, worst first. An empty
// result means clean.
func Lint(dir, namespace string, values map[string]any) []support.Message {
	defer quietLog()()
	l := lint.All(dir, values, namespace, true)
	msgs := l.Messages
	sort.SliceStable(msgs, func(i, j int) bool { return msgs[i].Severity > msgs[j].Severity })
	return msgs
}

// Files renders the chart template by template (engine.Render: each template's text in its own
// order, comments kept) and returns them by template name ("control-plane.yaml"), without the
// partials and empty renderings.
func Files(dir, release, namespace string, values map[string]any) (map[string]string, error) {
	ch, err := Load(dir)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, values); err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion()
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for name, text := range out {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") || strings.TrimSpace(text) == "" {
			continue
		}
		files[base] = text
	}
	return files, nil
}

// DeployFiles maps each file of deploy/ to the chart templates it is made of, in order.
var DeployFiles = map[string][]string{
	"control-plane.yaml":  {"namespace.yaml", "control-plane.yaml"},
	"inject-webhook.yaml": {"inject-webhook.yaml"},
	"cert-manager.yaml":   {"certificates.yaml"},
}

// generatedHeader starts every generated file of deploy/.
const generatedHeader = "# Generated from charts/stormgate (helm template with ci/deploy-values.yaml): edit the chart and run\n" +
	"# `make deploy-manifests`, never this file. With Helm, install the chart instead (docs/kubernetes.md).\n"

// Deploy renders deploy/'s files from the chart in dir with the values in dir/ci/deploy-values.yaml.
func Deploy(dir string) (map[string][]byte, error) {
	values, err := ValuesFile(filepath.Join(dir, "ci", "deploy-values.yaml"))
	if err != nil {
		return nil, err
	}
	files, err := Files(dir, Release, Namespace, values)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	used := map[string]bool{}
	for name, parts := range DeployFiles {
		var b bytes.Buffer
		b.WriteString(generatedHeader)
		for _, p := range parts {
			text, ok := files[p]
			if !ok {
				continue
			}
			used[p] = true
			if b.Len() > len(generatedHeader) {
				b.WriteString("---\n")
			}
			b.WriteString(strings.TrimLeft(text, "\n"))
			if !strings.HasSuffix(text, "\n") {
				b.WriteString("\n")
			}
		}
		out[name] = b.Bytes()
	}
	for p := range files {
		if !used[p] {
			return nil, fmt.Errorf("template %s renders with the deploy values but goes into no file of deploy/ (helmchart.DeployFiles)", p)
		}
	}
	return out, nil
}

// kubeVersion is the Kubernetes version renderings assume (.Capabilities.KubeVersion, the chart's
// kubeVersion constraint): the release of the client-go this module pins (v0.34.2 -> v1.34.2), the
// same release as the kube-apiserver the tests run. Helm's own default comes from build flags this
// module's builds do not set.
func kubeVersion() *chartutil.KubeVersion {
	v := "v1.34.0"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "k8s.io/client-go" && strings.HasPrefix(m.Version, "v0.") {
				v = "v1." + strings.TrimPrefix(m.Version, "v0.")
			}
		}
	}
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	return &chartutil.KubeVersion{Version: v, Major: parts[0], Minor: parts[1]}
}
