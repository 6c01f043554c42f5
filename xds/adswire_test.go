package xds

import (
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// coreNode is what a control plane reads from the node the client sends: the
// client's encoding decoded by envoy's generated type.
func coreNode(t testing.TB, n *adsNode) *core.Node {
	t.Helper()
	b, err := (&adsRequest{Node: n}).marshal()
	if err != nil {
		t.Fatal(err)
	}
	var req discovery.DiscoveryRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	return req.GetNode()
}

// Every request the client sends decodes, with envoy's generated types, to the
// message those types would have written.
func TestADSRequestMatchesEnvoyTypes(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{
		"namespace": "shop", "labels": map[string]any{"app": "payment"}, "provider_ports": []any{20880.0},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   *adsRequest
		want *discovery.DiscoveryRequest
	}{
		{"first", &adsRequest{
			Node:    &adsNode{ID: "p-0.shop", Cluster: "east", Metadata: md, UserAgentName: "stormgate", UserAgentVersion: "v1.2.3"},
			TypeURL: ExtensionConfigType, ResourceNames: []string{"stormgate"}, VersionInfo: "abc",
		}, &discovery.DiscoveryRequest{
			Node: &core.Node{Id: "p-0.shop", Cluster: "east", Metadata: md, UserAgentName: "stormgate",
				UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "v1.2.3"}},
			TypeUrl: ExtensionConfigType, ResourceNames: []string{"stormgate"}, VersionInfo: "abc",
		}},
		{"ack", &adsRequest{TypeURL: ExtensionConfigType, ResourceNames: []string{"a", "b"}, VersionInfo: "v2", ResponseNonce: "7"},
			&discovery.DiscoveryRequest{TypeUrl: ExtensionConfigType, ResourceNames: []string{"a", "b"}, VersionInfo: "v2", ResponseNonce: "7"}},
		{"nack", &adsRequest{TypeURL: ExtensionConfigType, VersionInfo: "v1", ResponseNonce: "8",
			ErrorDetail: &rpcStatus{Code: codeInvalidArgument, Message: "hold.timeout: 0s: must be ≥ 1ms"}},
			&discovery.DiscoveryRequest{TypeUrl: ExtensionConfigType, VersionInfo: "v1", ResponseNonce: "8",
				ErrorDetail: &status.Status{Code: 3, Message: "hold.timeout: 0s: must be ≥ 1ms"}}},
		{"negative code", &adsRequest{ErrorDetail: &rpcStatus{Code: -1}},
			&discovery.DiscoveryRequest{ErrorDetail: &status.Status{Code: -1}}},
		{"empty", &adsRequest{}, &discovery.DiscoveryRequest{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.in.marshal()
			if err != nil {
				t.Fatal(err)
			}
			var got discovery.DiscoveryRequest
			if err := proto.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(tc.want, &got) {
				t.Fatalf("decoded by envoy's types:\n got %v\nwant %v", &got, tc.want)
			}
			if len(got.ProtoReflect().GetUnknown()) != 0 {
				t.Fatalf("unknown fields in the encoding")
			}
		})
	}
}

// A response written by envoy's generated types (as go-control-plane's server
// writes it) reads back field for field, resources in the plain and the TTL
// wrapper forms, and fields the client does not use are skipped.
func TestADSResponseFromEnvoyTypes(t *testing.T) {
	settings := &sg.Settings{Hold: &sg.Hold{Timeout: durationpb.New(7e9)}}
	tc, err := anypb.New(settings)
	if err != nil {
		t.Fatal(err)
	}
	tec, err := anypb.New(&core.TypedExtensionConfig{Name: "stormgate", TypedConfig: tc})
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := anypb.New(&discovery.Resource{Name: "stormgate", Version: "9", Resource: tec, Ttl: durationpb.New(3e9)})
	if err != nil {
		t.Fatal(err)
	}
	heartbeat, err := anypb.New(&discovery.Resource{Name: "stormgate", Version: "9", Ttl: durationpb.New(3e9)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(&discovery.DiscoveryResponse{
		VersionInfo: "9", Resources: []*anypb.Any{tec, wrapped, heartbeat}, TypeUrl: ExtensionConfigType, Nonce: "42",
		Canary: true, ControlPlane: &core.ControlPlane{Identifier: "cp-a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := unmarshalResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.VersionInfo != "9" || r.TypeURL != ExtensionConfigType || r.Nonce != "42" || len(r.Resources) != 3 {
		t.Fatalf("response %+v", r)
	}
	for i, a := range []*anypb.Any{tec, wrapped, heartbeat} {
		if r.Resources[i].TypeURL != a.GetTypeUrl() || string(r.Resources[i].Value) != string(a.GetValue()) {
			t.Fatalf("resource %d: %s", i, r.Resources[i].TypeURL)
		}
	}
	inner, ok, err := unmarshalWrapped(r.Resources[1].Value)
	if err != nil || !ok || inner.TypeURL != ExtensionConfigType || string(inner.Value) != string(tec.GetValue()) {
		t.Fatalf("wrapped: ok %v err %v %s", ok, err, inner.TypeURL)
	}
	if _, ok, err := unmarshalWrapped(r.Resources[2].Value); ok || err != nil {
		t.Fatalf("a TTL heartbeat has no resource: ok %v err %v", ok, err)
	}
	name, cfg, has, err := unmarshalTypedExtensionConfig(inner.Value)
	if err != nil || !has || name != "stormgate" || cfg.TypeURL != SettingsType {
		t.Fatalf("TypedExtensionConfig: %q %v %v %s", name, has, err, cfg.TypeURL)
	}
	var got sg.Settings
	if err := proto.Unmarshal(cfg.Value, &got); err != nil || !proto.Equal(&got, settings) {
		t.Fatalf("settings: %v %v", err, &got)
	}

	// The client picks its resource out of the response the same way.
	c := &Client{cfg: ClientConfig{ResourceName: "stormgate"}}
	raw, err := c.find(&adsResponse{Resources: r.Resources[1:]})
	if err != nil || raw == nil || raw.TypeURL != SettingsType {
		t.Fatalf("find: %v %v", raw, err)
	}
}

// Malformed responses fail with an error, never a panic, and never read past the message.
func TestADSResponseMalformed(t *testing.T) {
	good, err := proto.Marshal(&discovery.DiscoveryResponse{VersionInfo: "1", Nonce: "2",
		Resources: []*anypb.Any{{TypeUrl: ExtensionConfigType, Value: []byte{0x0a, 0x01, 'x'}}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(good) { // every truncation
		if _, err := unmarshalResponse(good[:i]); err == nil && i > 0 && !validPrefix(good[:i]) {
			t.Errorf("truncated at %d: no error", i)
		}
	}
	for _, b := range [][]byte{
		{0x0a, 0x05, 'a'},              // length past the end
		{0x12, 0x02, 0x0a, 0x05},       // a resource whose type_url runs past its end
		{0x0c},                         // end-group with no start
		{0x08},                         // varint with no value
		{0x0a, 0xff, 0xff, 0xff, 0xff}, // unterminated length
	} {
		if _, err := unmarshalResponse(b); err == nil || !strings.Contains(err.Error(), "malformed") {
			t.Errorf("% x: err %v", b, err)
		}
	}
}

// validPrefix: a truncation that falls between two fields is a valid, shorter message.
func validPrefix(b []byte) bool {
	var m discovery.DiscoveryResponse
	return proto.Unmarshal(b, &m) == nil
}

func FuzzADSResponse(f *testing.F) {
	good, _ := proto.Marshal(&discovery.DiscoveryResponse{VersionInfo: "1", Nonce: "2", TypeUrl: ExtensionConfigType,
		Resources: []*anypb.Any{{TypeUrl: discoveryResource, Value: []byte{0x12, 0x03, 0x0a, 0x01, 'x'}}}})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := unmarshalResponse(b)
		var ref discovery.DiscoveryResponse
		refErr := proto.Unmarshal(b, &ref)
		if err != nil {
			return // stricter than the reference is fine (it fails on any nested resource error too)
		}
		if refErr != nil {
			// The reference decoder also checks UTF-8 in strings and nested messages
			// it knows; ours reads Any values as bytes.
			return
		}
		if r.VersionInfo != ref.GetVersionInfo() || r.Nonce != ref.GetNonce() || r.TypeURL != ref.GetTypeUrl() ||
			len(r.Resources) != len(ref.GetResources()) {
			t.Fatalf("ours %+v, envoy's %v", r, &ref)
		}
		for i, a := range ref.GetResources() {
			if r.Resources[i].TypeURL != a.GetTypeUrl() || string(r.Resources[i].Value) != string(a.GetValue()) {
				t.Fatalf("resource %d differs", i)
			}
		}
		c := &Client{cfg: ClientConfig{ResourceName: "stormgate"}}
		_, _ = c.find(r)
	})
}
