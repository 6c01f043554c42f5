package main

import (
	"errors"
	"testing"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
)

// fakeStage records what it was asked and refuses when told to.
type fakeStage[C any] struct {
	refuse  error
	checked int
	updated []C
}

func (f *fakeStage[C]) Check(C) error { f.checked++; return f.refuse }

func (f *fakeStage[C]) Update(c C) error {
	if f.refuse != nil {
		return f.refuse
	}
	f.updated = append(f.updated, c)
	return nil
}

// TestApplyIsAllOrNothing: a change one stage refuses reaches no stage and is not
// stored: /config_dump shows what runs (issue 10: the proxy took a push that
// admission then refused, and the push was NACKed with the proxy running it).
func TestApplyIsAllOrNothing(t *testing.T) {
	base := settings.Defaults()
	for _, refusing := range []string{"proxy", "admission"} {
		t.Run(refusing, func(t *testing.T) {
			store, err := settings.NewStore(base, settings.Version(base), settings.SourceDefaults, nil)
			if err != nil {
				t.Fatal(err)
			}
			srv, adm := &fakeStage[proxy.Config]{}, &fakeStage[admission.Config]{}
			if refusing == "proxy" {
				srv.refuse = errors.New("no")
			} else {
				adm.refuse = errors.New("no")
			}
			l := &liveSettings{log: zap.NewNop(), store: store, srv: srv, adm: adm, level: zap.NewAtomicLevel()}
			next := settings.Defaults()
			*next.Upstream.Connections = 2
			if err := l.apply(next, "v2", settings.SourceXDS); err == nil {
				t.Fatal("a refused change was applied")
			}
			if len(srv.updated) != 0 || len(adm.updated) != 0 {
				t.Fatalf("a stage was updated although %s refused: proxy %d, admission %d", refusing, len(srv.updated), len(adm.updated))
			}
			if !settings.Equal(store.Settings(), base) {
				t.Fatal("the store shows settings that do not run")
			}
		})
	}
	// Both accept: both updated, stored.
	store, _ := settings.NewStore(base, settings.Version(base), settings.SourceDefaults, nil)
	srv, adm := &fakeStage[proxy.Config]{}, &fakeStage[admission.Config]{}
	l := &liveSettings{log: zap.NewNop(), store: store, srv: srv, adm: adm, level: zap.NewAtomicLevel()}
	next := settings.Defaults()
	*next.Upstream.Connections = 2
	if err := l.apply(next, "v2", settings.SourceXDS); err != nil {
		t.Fatal(err)
	}
	if len(srv.updated) != 1 || len(adm.updated) != 1 || srv.updated[0].UpstreamConns != 2 || !settings.Equal(store.Settings(), next) {
		t.Fatalf("accepted change: proxy %v admission %d stored %v", srv.updated, len(adm.updated), store.Settings())
	}
}
