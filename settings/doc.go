// Package settings owns Stormgate's settings: the stormgate.v1.Settings
// schema (generated Go in stormgatev1), the one place defaults live
// (Defaults), the rule table that gives every field its meaning, allowed
// range and live-ness (Validate, Fields, CheckLive), the YAML loader
// (LoadFile, ReadSettingsFile, ParseAssignments for --set and annotations),
// merging of partial settings (Merge, MergeLayers with the source of every
// field), each stage's part of the settings (ProxyConfig, AdmissionConfig),
// and the Store of what is in force with its /config_dump handler.
//
// Data flow: defaults < file < flags (MergeLayers) -> Validate -> Store. A
// push from xDS or a SIGHUP reload is merged over that base, checked whole
// (Validate, CheckLive against what runs), and swapped into the Store
// atomically; each stage then applies its part.
//
// Concurrency: a *stormgatev1.Settings handed out by this package (Store.Load,
// Defaults, Merge, LoadFile) is never mutated afterwards by this package;
// callers must treat values read from a Store as immutable. Store is safe for
// concurrent use; Load is one atomic read.
package settings
