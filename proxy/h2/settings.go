package h2

import "encoding/binary"

// SettingID identifies a SETTINGS parameter (RFC 9113 §6.5.2).
type SettingID uint16

// Settings parameters.
const (
	SettingHeaderTableSize       SettingID = 0x1
	SettingEnablePush            SettingID = 0x2
	SettingMaxConcurrentStreams  SettingID = 0x3
	SettingInitialWindowSize     SettingID = 0x4
	SettingMaxFrameSize          SettingID = 0x5
	SettingMaxHeaderListSize     SettingID = 0x6
	SettingEnableConnectProtocol SettingID = 0x8 // RFC 8441
	SettingNoRFC7540Priorities   SettingID = 0x9 // RFC 9218
)

// Initial values and limits (RFC 9113 §6.5.2, §6.9.2).
const (
	DefaultHeaderTableSize   = 4096
	DefaultInitialWindowSize = 65535
	MaxWindowSize            = 1<<31 - 1
	// Unlimited is how Settings spells "no limit" for SETTINGS_MAX_CONCURRENT_STREAMS and
	// SETTINGS_MAX_HEADER_LIST_SIZE, whose initial values are unlimited.
	Unlimited = ^uint32(0)
)

// Setting is one SETTINGS parameter.
type Setting struct {
	ID  SettingID
	Val uint32
}

// Settings is one side's parameters. The zero value is not the protocol's initial state: use
// DefaultSettings.
type Settings struct {
	HeaderTableSize      uint32 `json:"header_table_size"`
	EnablePush           bool   `json:"enable_push"`
	MaxConcurrentStreams uint32 `json:"max_concurrent_streams"` // Unlimited until the peer says otherwise
	InitialWindowSize    uint32 `json:"initial_window_size"`
	MaxFrameSize         uint32 `json:"max_frame_size"`
	MaxHeaderListSize    uint32 `json:"max_header_list_size"` // Unlimited until the peer says otherwise
}

// DefaultSettings returns the values in force before any SETTINGS frame (§6.5.2).
func DefaultSettings() Settings {
	return Settings{
		HeaderTableSize:      DefaultHeaderTableSize,
		EnablePush:           true,
		MaxConcurrentStreams: Unlimited,
		InitialWindowSize:    DefaultInitialWindowSize,
		MaxFrameSize:         DefaultMaxFrameSize,
		MaxHeaderListSize:    Unlimited,
	}
}

var (
	errEnablePush     = connErr(ErrCodeProtocol, "SETTINGS_ENABLE_PUSH not 0 or 1")
	errWindowTooLarge = connErr(ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1")
	errMaxFrameSize   = connErr(ErrCodeProtocol, "SETTINGS_MAX_FRAME_SIZE outside 16384..16777215")
	errBoolSetting    = connErr(ErrCodeProtocol, "boolean SETTINGS parameter not 0 or 1")
)

// checkSettings validates every parameter of a SETTINGS payload (its length already a multiple of 6).
func checkSettings(payload []byte) error {
	for i := 0; i+6 <= len(payload); i += 6 {
		if err := checkSetting(settingAt(payload, i)); err != nil {
			return err
		}
	}
	return nil
}

func checkSetting(s Setting) error {
	switch s.ID {
	case SettingEnablePush:
		if s.Val > 1 {
			return errEnablePush
		}
	case SettingInitialWindowSize:
		if s.Val > MaxWindowSize {
			return errWindowTooLarge
		}
	case SettingMaxFrameSize:
		if s.Val < DefaultMaxFrameSize || s.Val > MaxFrameSizeLimit {
			return errMaxFrameSize
		}
	case SettingEnableConnectProtocol, SettingNoRFC7540Priorities:
		if s.Val > 1 {
			return errBoolSetting
		}
	}
	return nil
}

func settingAt(payload []byte, i int) Setting {
	return Setting{ID: SettingID(binary.BigEndian.Uint16(payload[i:])), Val: binary.BigEndian.Uint32(payload[i+2:])}
}

// NumSettings is the number of parameters in a SETTINGS payload.
func NumSettings(payload []byte) int { return len(payload) / 6 }

// SettingAt returns parameter i of a SETTINGS payload; it panics when i is out of range, like an index.
func SettingAt(payload []byte, i int) Setting {
	if i < 0 || i >= NumSettings(payload) {
		panic("h2: SettingAt index out of range")
	}
	return settingAt(payload, i*6)
}

// Apply validates a SETTINGS payload (not an ACK) and applies it to s in order, as §6.5.3 requires (a
// parameter given twice takes its last value; unknown parameters are ignored). On error s is unchanged.
// It never allocates.
func (s *Settings) Apply(payload []byte) error {
	if len(payload)%6 != 0 {
		return errSettingsLength
	}
	if err := checkSettings(payload); err != nil {
		return err
	}
	for i := 0; i+6 <= len(payload); i += 6 {
		p := settingAt(payload, i)
		switch p.ID {
		case SettingHeaderTableSize:
			s.HeaderTableSize = p.Val
		case SettingEnablePush:
			s.EnablePush = p.Val == 1
		case SettingMaxConcurrentStreams:
			s.MaxConcurrentStreams = p.Val
		case SettingInitialWindowSize:
			s.InitialWindowSize = p.Val
		case SettingMaxFrameSize:
			s.MaxFrameSize = p.Val
		case SettingMaxHeaderListSize:
			s.MaxHeaderListSize = p.Val
		}
	}
	return nil
}

// AppendSettings appends a SETTINGS frame carrying params, in order.
func AppendSettings(dst []byte, params ...Setting) []byte {
	dst = AppendFrameHeader(dst, FrameHeader{Length: uint32(6 * len(params)), Type: FrameSettings})
	for _, p := range params {
		dst = binary.BigEndian.AppendUint16(dst, uint16(p.ID))
		dst = binary.BigEndian.AppendUint32(dst, p.Val)
	}
	return dst
}

// AppendSettingsAck appends a SETTINGS frame with the ACK flag.
func AppendSettingsAck(dst []byte) []byte {
	return AppendFrameHeader(dst, FrameHeader{Type: FrameSettings, Flags: FlagAck})
}

// Diff lists the parameters of s that differ from base, in parameter order: the SETTINGS payload that
// moves a peer from base to s. It allocates the returned slice (small, once per connection).
func (s Settings) Diff(base Settings) []Setting {
	var out []Setting
	add := func(id SettingID, v, b uint32) {
		if v != b {
			out = append(out, Setting{id, v})
		}
	}
	add(SettingHeaderTableSize, s.HeaderTableSize, base.HeaderTableSize)
	add(SettingEnablePush, b2u(s.EnablePush), b2u(base.EnablePush))
	add(SettingMaxConcurrentStreams, s.MaxConcurrentStreams, base.MaxConcurrentStreams)
	add(SettingInitialWindowSize, s.InitialWindowSize, base.InitialWindowSize)
	add(SettingMaxFrameSize, s.MaxFrameSize, base.MaxFrameSize)
	add(SettingMaxHeaderListSize, s.MaxHeaderListSize, base.MaxHeaderListSize)
	return out
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
