package settings

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// MarshalJSON prints settings in the file's shape: snake_case names, every
// field (unset ones as null), durations as "3s", indented, stable output.
func MarshalJSON(s *sg.Settings) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(s)
	if err != nil {
		return nil, err
	}
	// protojson's spacing is deliberately unstable; normalise it.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// MarshalYAML prints settings as a YAML file that LoadFile reads back.
func MarshalYAML(s *sg.Settings) ([]byte, error) {
	b, err := MarshalJSON(s)
	if err != nil {
		return nil, err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	blockStyle(&n)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// blockStyle turns JSON's flow style into plain block YAML; the encoder
// quotes what needs quoting.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// Version is a content hash of settings: equal settings give equal versions
// across processes and restarts (deterministic protobuf encoding).
func Version(s *sg.Settings) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return "invalid"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
