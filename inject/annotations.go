package inject

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stormgate/stormgate/settings"
)

// annotationPrefix starts every annotation Stormgate reads or writes.
const annotationPrefix = "stormgate.io/"

// podAnnotations are the annotations with a meaning of their own (the settings annotations below
// are the others). A stormgate.io/ annotation that is neither is an error: a typo of the opt-out
// must not inject the pod, nor a misspelt setting be ignored.
var podAnnotations = []string{
	AnnotationInject, AnnotationInjected, AnnotationInboundPorts, AnnotationProxyPort, AnnotationMetricsPort,
	AnnotationUpstreamConns, AnnotationXDSAddress, AnnotationXDSCASecret, AnnotationXDSCertSecret, AnnotationLogLevel,
	AnnotationImage, AnnotationInitImage, AnnotationCPURequest, AnnotationMemoryRequest, AnnotationCPULimit,
	AnnotationMemoryLimit, AnnotationNativeSidecar, AnnotationBacklogSysctls, AnnotationRedirect,
}

// dedicatedSettings are the settings with an annotation (and a `sidecar run` flag) of their own.
var dedicatedSettings = map[string]string{
	"listener.address":       AnnotationProxyPort,
	"listener.inbound_ports": AnnotationInboundPorts,
	"upstream.connections":   AnnotationUpstreamConns,
	"log.level":              AnnotationLogLevel,
}

// fixedInPod are the settings a pod cannot choose, and why.
var fixedInPod = map[string]string{
	"listener.transparent": "an injected sidecar always runs in transparent mode",
	"upstream.address":     "in transparent mode the provider is 127.0.0.1 on each inbound port (" + AnnotationInboundPorts + ")",
	"log.format":           "an injected sidecar logs JSON (kubectl logs, log collectors)",
}

// settingAnnotations maps each per-pod settings annotation to its setting path. It is derived from
// the schema (settings.Fields): stormgate.io/<section>-<field>, underscores as dashes, e.g.
// stormgate.io/hold-timeout for hold.timeout; the settings in dedicatedSettings and fixedInPod have
// none. Every setting added to the schema gets its annotation without a change here.
var settingAnnotations = func() map[string]string {
	m := map[string]string{}
	for _, f := range settings.Fields() {
		if _, ok := dedicatedSettings[f.Path]; ok {
			continue
		}
		if _, ok := fixedInPod[f.Path]; ok {
			continue
		}
		m[derivedAnnotation(f.Path)] = f.Path
	}
	return m
}()

// derivedAnnotation is the annotation name a setting path would have: hold.timeout ->
// stormgate.io/hold-timeout.
func derivedAnnotation(path string) string {
	return annotationPrefix + strings.NewReplacer(".", "-", "_", "-").Replace(path)
}

// SettingAnnotation returns the annotation that sets a setting per pod (its own, such as
// stormgate.io/upstream-conns, or the one derived from its path, such as stormgate.io/hold-timeout);
// ok is false for a setting a pod cannot choose.
func SettingAnnotation(path string) (annotation string, ok bool) {
	if a, ok := dedicatedSettings[path]; ok {
		return a, true
	}
	if _, fixed := fixedInPod[path]; fixed {
		return "", false
	}
	a := derivedAnnotation(path)
	_, ok = settingAnnotations[a]
	return a, ok
}

// checkAnnotationNames refuses every stormgate.io/ annotation Stormgate does not know, suggesting
// the nearest known one.
func checkAnnotationNames(ann map[string]string) []error {
	var known []string
	var errs []error
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		name, ours := strings.CutPrefix(k, annotationPrefix)
		if !ours || slices.Contains(podAnnotations, k) || settingAnnotations[k] != "" {
			continue
		}
		if known == nil {
			for _, a := range podAnnotations {
				known = append(known, strings.TrimPrefix(a, annotationPrefix))
			}
			for a := range settingAnnotations {
				known = append(known, strings.TrimPrefix(a, annotationPrefix))
			}
			slices.Sort(known)
		}
		msg := fmt.Sprintf("annotation %s: unknown", k)
		for path, why := range fixedInPod {
			if derivedAnnotation(path) == k {
				msg = fmt.Sprintf("annotation %s: %s cannot be set per pod: %s", k, path, why)
			}
		}
		if s := settings.Suggest(name, known); s != "" {
			msg += "; did you mean " + annotationPrefix + s + "?"
		} else if !strings.Contains(msg, "per pod") {
			msg += " (docs/kubernetes.md lists them; settings are stormgate.io/<section>-<field>, e.g. stormgate.io/hold-timeout)"
		}
		errs = append(errs, fmt.Errorf("%s", msg))
	}
	return errs
}

// settingsFromAnnotations returns settings with the settings annotations in ann applied: an
// annotation replaces a flag's value for its path. The result is in schema order.
func settingsFromAnnotations(given []settings.Assignment, ann map[string]string) []settings.Assignment {
	byPath := map[string]string{}
	for _, a := range given {
		byPath[a.Path] = a.Value
	}
	for k, v := range ann {
		if path := settingAnnotations[k]; path != "" {
			byPath[path] = strings.TrimSpace(v)
		}
	}
	if len(byPath) == 0 {
		return nil
	}
	out := make([]settings.Assignment, 0, len(byPath))
	for _, f := range settings.Fields() {
		if v, ok := byPath[f.Path]; ok {
			out = append(out, settings.Assignment{Path: f.Path, Value: v})
			delete(byPath, f.Path)
		}
	}
	rest := make([]string, 0, len(byPath))
	for p := range byPath {
		rest = append(rest, p)
	}
	slices.Sort(rest)
	for _, p := range rest { // not a setting (a flag's typo): the settings decoder names it
		out = append(out, settings.Assignment{Path: p, Value: byPath[p]})
	}
	return out
}

// resolvePortNames turns the names in a stormgate.io/inbound-ports value ("dubbo", "dubbo,20881")
// into the numbers the pod's containers declare for them (TCP containerPorts, as probes resolve
// named ports); numbers pass unchanged.
func resolvePortNames(v string, spec *corev1.PodSpec) (string, error) {
	items := strings.Split(v, ",")
	for i, it := range items {
		it = strings.TrimSpace(it)
		if it == "" || strings.Trim(it, "0123456789") == "" {
			continue
		}
		var found []int32
		var named []string
		for _, ctr := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, p := range ctr.Ports {
				if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
					continue
				}
				if p.Name != "" {
					named = append(named, fmt.Sprintf("%s=%d", p.Name, p.ContainerPort))
				}
				if p.Name == it && !slices.Contains(found, p.ContainerPort) {
					found = append(found, p.ContainerPort)
				}
			}
		}
		switch {
		case len(found) == 0 && len(named) == 0:
			return "", fmt.Errorf("no container declares a TCP port named %q (no container port has a name): give the number", it)
		case len(found) == 0:
			return "", fmt.Errorf("no container declares a TCP port named %q (named ports: %s)", it, strings.Join(named, ", "))
		case len(found) > 1:
			return "", fmt.Errorf("port name %q is %v in different containers: give the number", it, found)
		}
		items[i] = strconv.Itoa(int(found[0]))
	}
	return strings.Join(items, ","), nil
}
