package xds

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The ADS messages the client sends and reads, encoded and decoded here with
// protowire instead of through the generated envoy and gRPC packages: those
// pull gRPC, the envoy/config/core types and their validation tables into the
// binary, 5.4 MB of the 20.8 MB data-plane binary for the handful of fields
// below (issue 13: the sidecar image must be a few MB). Field numbers are
// envoy's (api/envoy/service/discovery/v3/discovery.proto,
// api/envoy/config/core/v3/base.proto and extension.proto,
// google/rpc/status.proto); adswire_test.go checks every message against the
// generated types, both ways, and fuzzes the decoders.
//
//	message                                   fields used here
//	DiscoveryRequest                          version_info 1, node 2, resource_names 3, type_url 4, response_nonce 5, error_detail 6
//	  config.core.v3.Node                     id 1, cluster 2, metadata 3 (Struct), user_agent_name 6, user_agent_version 7
//	  google.rpc.Status                       code 1, message 2
//	DiscoveryResponse                         version_info 1, resources 2 (Any), type_url 4, nonce 5
//	  google.protobuf.Any                     type_url 1, value 2
//	  discovery.v3.Resource (TTL wrapper)     resource 2 (Any)
//	  config.core.v3.TypedExtensionConfig     name 1, typed_config 2 (Any)
//
// Fields not listed are skipped when read (a newer control plane may send
// them) and never written.

// adsRequest is a DiscoveryRequest.
type adsRequest struct {
	VersionInfo   string
	Node          *adsNode // the first request of a stream only
	ResourceNames []string
	TypeURL       string
	ResponseNonce string
	ErrorDetail   *rpcStatus // a NACK
}

// adsNode is a config.core.v3.Node.
type adsNode struct {
	ID, Cluster      string
	Metadata         *structpb.Struct
	UserAgentName    string
	UserAgentVersion string
}

// rpcStatus is a google.rpc.Status.
type rpcStatus struct {
	Code    int32
	Message string
}

// adsResponse is a DiscoveryResponse.
type adsResponse struct {
	VersionInfo string
	Resources   []anyMsg
	TypeURL     string
	Nonce       string
}

// anyMsg is a google.protobuf.Any.
type anyMsg struct {
	TypeURL string
	Value   []byte
}

// codeInvalidArgument is gRPC's INVALID_ARGUMENT, the code of a NACK's error_detail.
const codeInvalidArgument = 3

// marshal encodes r.
func (r *adsRequest) marshal() ([]byte, error) {
	var b []byte
	b = appendString(b, 1, r.VersionInfo)
	if n := r.Node; n != nil {
		nb, err := n.marshal()
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, nb)
	}
	for _, name := range r.ResourceNames {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	b = appendString(b, 4, r.TypeURL)
	b = appendString(b, 5, r.ResponseNonce)
	if s := r.ErrorDetail; s != nil {
		var sb []byte
		if s.Code != 0 {
			sb = protowire.AppendTag(sb, 1, protowire.VarintType)
			sb = protowire.AppendVarint(sb, uint64(int64(s.Code))) // int32: sign-extended, as protobuf does
		}
		sb = appendString(sb, 2, s.Message)
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, sb)
	}
	return b, nil
}

func (n *adsNode) marshal() ([]byte, error) {
	var b []byte
	b = appendString(b, 1, n.ID)
	b = appendString(b, 2, n.Cluster)
	if n.Metadata != nil {
		mb, err := proto.MarshalOptions{Deterministic: true}.Marshal(n.Metadata)
		if err != nil {
			return nil, fmt.Errorf("node metadata: %w", err)
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, mb)
	}
	b = appendString(b, 6, n.UserAgentName)
	b = appendString(b, 7, n.UserAgentVersion)
	return b, nil
}

// appendString appends a string field, omitted when empty (proto3 implicit presence).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

var errBadWire = errors.New("malformed protobuf")

// fields calls f for each field of the message in b; f gets the value of a
// length-delimited field in v (nil for the other wire types, which it may
// ignore). It fails on malformed input.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadWire
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errBadWire
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// unmarshalResponse decodes a DiscoveryResponse. The resources' values alias b.
func unmarshalResponse(b []byte) (*adsResponse, error) {
	r := &adsResponse{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			r.VersionInfo = string(v)
		case 2:
			a, err := unmarshalAny(v)
			if err != nil {
				return err
			}
			r.Resources = append(r.Resources, a)
		case 4:
			r.TypeURL = string(v)
		case 5:
			r.Nonce = string(v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("DiscoveryResponse: %w", err)
	}
	return r, nil
}

func unmarshalAny(b []byte) (anyMsg, error) {
	var a anyMsg
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			a.TypeURL = string(v)
		case 2:
			a.Value = v
		}
		return nil
	})
	return a, err
}

// unmarshalWrapped returns the resource inside a discovery.v3.Resource (ok
// false: none, a TTL heartbeat).
func unmarshalWrapped(b []byte) (res anyMsg, ok bool, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 2 || typ != protowire.BytesType {
			return nil
		}
		a, err := unmarshalAny(v)
		res, ok = a, true
		return err
	})
	return res, ok, err
}

// unmarshalTypedExtensionConfig returns a TypedExtensionConfig's name and
// typed_config (hasConfig false: absent).
func unmarshalTypedExtensionConfig(b []byte) (name string, config anyMsg, hasConfig bool, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			name = string(v)
		case 2:
			a, err := unmarshalAny(v)
			if err != nil {
				return err
			}
			config, hasConfig = a, true
		}
		return nil
	})
	return name, config, hasConfig, err
}
