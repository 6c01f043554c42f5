package xds

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	sg "github.com/stormgate/stormgate/xds/stormgatev1"
)

// Where the active settings came from, as /config_dump and
// stormgate_xds_config_info show it.
const (
	SourceDefaults = "defaults"
	SourceFile     = "file"
	SourceXDS      = "xds"
)

// Active is one immutable, validated settings value with its version and
// source. Never modify an Active or its Settings.
type Active struct {
	Settings *sg.Settings
	Version  string
	Source   string
	Applied  time.Time
}

// Store holds the active settings behind an atomic pointer: Load is a single
// atomic read, fit for hot paths. Update validates, refuses what cannot
// change live, swaps and wakes every subscriber. Safe for concurrent use.
type Store struct {
	cur  atomic.Pointer[Active]
	mu   sync.Mutex // serialises Update; guards subs
	subs map[chan struct{}]struct{}
	info *prometheus.GaugeVec // nil without a registerer
}

// NewStore starts a store with complete settings s (normally WithDefaults of
// a file). It registers stormgate_xds_config_info{version,source} on reg,
// which may be nil.
func NewStore(s *sg.Settings, version, source string, reg prometheus.Registerer) (*Store, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	st := &Store{subs: map[chan struct{}]struct{}{}}
	if reg != nil {
		st.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stormgate_xds_config_info",
			Help: "Always 1: the version and source (defaults, file, xds) of the active settings.",
		}, []string{"version", "source"})
		if err := reg.Register(st.info); err != nil {
			return nil, err
		}
	}
	st.swap(s, version, source)
	return st, nil
}

// Load returns the active settings. Never nil.
func (st *Store) Load() *Active { return st.cur.Load() }

// Settings returns the active settings value.
func (st *Store) Settings() *sg.Settings { return st.cur.Load().Settings }

// Update makes s (complete settings) active after Validate and CheckLive
// against the current value; on error nothing changes and the error is a
// Problems naming each field. Subscribers are woken after the swap.
func (st *Store) Update(s *sg.Settings, version, source string) error {
	if err := Validate(s); err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := CheckLive(st.cur.Load().Settings, s); err != nil {
		return err
	}
	st.swap(s, version, source)
	for ch := range st.subs {
		select {
		case ch <- struct{}{}:
		default: // already pending; the subscriber will Load the newest
		}
	}
	return nil
}

func (st *Store) swap(s *sg.Settings, version, source string) {
	st.cur.Store(&Active{Settings: s, Version: version, Source: source, Applied: time.Now()})
	if st.info != nil {
		st.info.Reset()
		st.info.WithLabelValues(version, source).Set(1)
	}
}

// Subscribe returns a channel that receives a value after each Update (one
// pending signal at most: on wake-up, Load the newest value) and a cancel
// function to call when done.
func (st *Store) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	st.mu.Lock()
	st.subs[ch] = struct{}{}
	st.mu.Unlock()
	return ch, func() {
		st.mu.Lock()
		delete(st.subs, ch)
		st.mu.Unlock()
	}
}

// ServeHTTP serves /config_dump: {"version":..,"source":..,"applied":..,
// "settings":{..every field, snake_case..}}; ?format=yaml prints the
// settings alone as a YAML file.
func (st *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a := st.Load()
	if r.URL.Query().Get("format") == "yaml" {
		b, err := MarshalYAML(a.Settings)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(b)
		return
	}
	settings, err := MarshalJSON(a.Settings)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b, err := json.MarshalIndent(struct {
		Version  string          `json:"version"`
		Source   string          `json:"source"`
		Applied  time.Time       `json:"applied"`
		Settings json.RawMessage `json:"settings"`
	}{a.Version, a.Source, a.Applied.UTC(), settings}, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}
