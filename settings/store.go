package settings

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Where a setting's value came from, per field in /config_dump and as the
// label of stormgate_xds_config_info.
const (
	SourceDefaults = "default" // built-in (Defaults)
	SourceFile     = "file"    // the --config file
	SourceFlag     = "flag"    // a sidecar run flag
	SourceXDS      = "xds"     // pushed by the control plane
	SourceAdmin    = "admin"   // changed at run time on the admin listener (POST /logging)
)

// Active is one immutable, validated settings value with its version and
// source. Never modify an Active or its Settings.
type Active struct {
	Settings *sg.Settings
	Version  string
	Source   string       // what last replaced the settings (at start: the most specific layer)
	Sources  FieldSources // per leaf field
	File     string       // the settings file the base came from; "" when none
	Applied  time.Time
}

// Rejection is the last settings version the sidecar refused, and why.
type Rejection struct {
	Version string    `json:"version"`
	Source  string    `json:"source"`
	Error   string    `json:"error"`
	At      time.Time `json:"at"`
}

// Store holds the active settings behind an atomic pointer: Load is a single
// atomic read, fit for hot paths. Update validates, refuses what cannot
// change live, lets the stages apply the change, and swaps. It also remembers the last
// rejected version (Reject) for /config_dump and stormgate_xds_rejecting.
// Safe for concurrent use.
type Store struct {
	cur       atomic.Pointer[Active]
	rejected  atomic.Pointer[Rejection]
	rejecting atomic.Bool                   // the newest xDS version is rejected
	mu        sync.Mutex                    // serialises Update, Rebase and Reject; guards base
	base      Layered                       // what an xDS push is merged over, with its sources
	info      *prometheus.GaugeVec          // nil without a registerer
	rejGauge  prometheus.Gauge              // nil without a registerer
	build     atomic.Pointer[string]        // the binary's version, for /config_dump (SetBuildVersion)
	liveLevel atomic.Pointer[func() string] // the log level in force (SetLiveLogLevel)
}

// NewStore starts a store with complete settings s (normally WithDefaults of
// a file), every field attributed to source. See NewLayeredStore.
func NewStore(s *sg.Settings, version, source string, reg prometheus.Registerer) (*Store, error) {
	return NewLayeredStore(allFrom(s, source), version, reg)
}

// NewLayeredStore starts a store with base (complete settings and the source
// of each field); base is also what later xDS pushes are compared with to
// attribute their fields. It registers stormgate_xds_config_info{version,
// source} and stormgate_xds_rejecting on reg, which may be nil.
func NewLayeredStore(base Layered, version string, reg prometheus.Registerer) (*Store, error) {
	if err := Validate(base.Settings); err != nil {
		return nil, err
	}
	st := &Store{base: base}
	if reg != nil {
		st.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stormgate_xds_config_info",
			Help: "Always 1: the version and source (default, file, flag, xds) of the active settings.",
		}, []string{"version", "source"})
		st.rejGauge = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_xds_rejecting",
			Help: "1 while the newest settings version the control plane serves is rejected (NACKed; the previous settings run), else 0.",
		})
		for _, c := range []prometheus.Collector{st.info, st.rejGauge} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	st.swap(&Active{Settings: base.Settings, Version: version, Source: base.Source, Sources: base.Sources, File: base.File})
	return st, nil
}

// Base returns what xDS pushes are merged over and attributed against: the
// settings from defaults, the file and the flags, with their sources (a
// handover carries it to the next process image).
func (st *Store) Base() Layered {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.base
}

// SetBuildVersion sets the binary's version that /config_dump prints as
// "stormgate_version" (after an upgrade, the new binary's).
func (st *Store) SetBuildVersion(v string) { st.build.Store(&v) }

// SetLiveLogLevel tells /config_dump how to read the log level in force: when
// it differs from the settings' log.level (changed with POST /logging since),
// /config_dump shows the level in force, from source SourceAdmin.
func (st *Store) SetLiveLogLevel(f func() string) { st.liveLevel.Store(&f) }

// inForce is a with the run-time changes SetLiveLogLevel reports.
func (st *Store) inForce(a *Active) (*sg.Settings, FieldSources) {
	f := st.liveLevel.Load()
	if f == nil {
		return a.Settings, a.Sources
	}
	lv, cur := (*f)(), a.Settings.GetLog().GetLevel()
	if lv == "" || cur == "" || strings.EqualFold(lv, cur) {
		return a.Settings, a.Sources
	}
	s := proto.Clone(a.Settings).(*sg.Settings)
	if s.Log == nil {
		s.Log = &sg.Log{}
	}
	s.Log.Level = proto.String(lv)
	srcs := maps.Clone(a.Sources)
	if srcs == nil {
		srcs = FieldSources{}
	}
	srcs["log.level"] = SourceAdmin
	return s, srcs
}

// Load returns the active settings. Never nil.
func (st *Store) Load() *Active { return st.cur.Load() }

// Settings returns the active settings value.
func (st *Store) Settings() *sg.Settings { return st.cur.Load().Settings }

// Update makes s (complete settings) active. It is the one place a change is
// checked: Validate, and CheckLive against the current value, every problem in
// one Problems naming each field. Then commit, when not nil, makes every stage
// apply s (the running sidecar's settings follow the store's only if it
// succeeds); on any error nothing is swapped. A field whose value equals the
// base's keeps the base's source; any other is attributed to source. An
// update from xDS ends a rejection (stormgate_xds_rejecting back to 0).
// Updates are serialised: commit runs with the store locked, so it must not
// call the Store's other updating methods.
func (st *Store) Update(s *sg.Settings, version, source string, commit func() error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.check(s, commit); err != nil {
		return err
	}
	st.swap(&Active{Settings: s, Version: version, Source: source, Sources: sourcesAgainst(st.base, s, source), File: st.base.File})
	if source == SourceXDS {
		st.setRejecting(false)
	}
	return nil
}

// Rebase makes base (re-read from the file and flags, e.g. on SIGHUP) both
// the active settings and the new base, checked and committed as Update does;
// source is what /config_dump shows as having made the change.
func (st *Store) Rebase(base Layered, version, source string, commit func() error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.check(base.Settings, commit); err != nil {
		return err
	}
	st.base = base
	st.swap(&Active{Settings: base.Settings, Version: version, Source: source, Sources: base.Sources, File: base.File})
	return nil
}

// check refuses s when it is invalid or cannot replace the current settings
// live (every problem at once), then runs commit. Called with st.mu held.
func (st *Store) check(s *sg.Settings, commit func() error) error {
	if err := AllProblems(Validate(s), CheckLive(st.cur.Load().Settings, s)); err != nil {
		return err
	}
	if commit != nil {
		return commit()
	}
	return nil
}

// Reject records that version from source was refused with err (the
// running settings stay). For source SourceXDS it sets stormgate_xds_rejecting
// to 1 until an xDS update is applied or Accepted is called.
func (st *Store) Reject(version, source string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	st.rejected.Store(&Rejection{Version: version, Source: source, Error: msg, At: time.Now()})
	if source == SourceXDS {
		st.setRejecting(true)
	}
}

// Accepted records that the control plane's newest version is one the
// sidecar runs (e.g. it went back to the running version after a rejected
// one): stormgate_xds_rejecting returns to 0. The last rejection stays in
// /config_dump for the record.
func (st *Store) Accepted() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.setRejecting(false)
}

// XDSResult is a ClientConfig.OnResult: a NACK is recorded with Reject, any
// other result with Accepted.
func (st *Store) XDSResult(version string, nack error) {
	if nack != nil {
		st.Reject(version, SourceXDS, nack)
		return
	}
	st.Accepted()
}

// LastRejected returns the last rejected version, or nil.
func (st *Store) LastRejected() *Rejection { return st.rejected.Load() }

// Rejecting reports whether the newest xDS version is rejected.
func (st *Store) Rejecting() bool { return st.rejecting.Load() }

// setRejecting is called with st.mu held.
func (st *Store) setRejecting(v bool) {
	st.rejecting.Store(v)
	if st.rejGauge != nil {
		g := 0.0
		if v {
			g = 1
		}
		st.rejGauge.Set(g)
	}
}

// swap is called with st.mu held, or before the store is shared.
func (st *Store) swap(a *Active) {
	a.Applied = time.Now()
	st.cur.Store(a)
	if st.info != nil {
		st.info.Reset()
		st.info.WithLabelValues(a.Version, a.Source).Set(1)
	}
}

// ServeHTTP serves /config_dump: {"version":..,"source":..,"file":..,
// "applied":..,"rejecting":..,"last_rejected":{..}|null,"field_sources":{..},
// "settings":{..every field, snake_case..}}; ?format=yaml prints the settings
// alone as a YAML file.
func (st *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a := st.Load()
	inForce, sources := st.inForce(a)
	if r.URL.Query().Get("format") == "yaml" {
		b, err := MarshalYAML(inForce)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(b)
		return
	}
	settings, err := MarshalJSON(inForce)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var rej *Rejection
	if p := st.LastRejected(); p != nil {
		r := *p
		r.At = r.At.UTC()
		rej = &r
	}
	build := ""
	if p := st.build.Load(); p != nil {
		build = *p
	}
	b, err := json.MarshalIndent(struct {
		Build        string          `json:"stormgate_version,omitempty"`
		Version      string          `json:"version"`
		Source       string          `json:"source"`
		File         string          `json:"file,omitempty"`
		Applied      time.Time       `json:"applied"`
		Rejecting    bool            `json:"rejecting"`
		LastRejected *Rejection      `json:"last_rejected"`
		FieldSources FieldSources    `json:"field_sources"`
		Settings     json.RawMessage `json:"settings"`
	}{build, a.Version, a.Source, a.File, a.Applied.UTC(), st.Rejecting(), rej, sources, settings}, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}
