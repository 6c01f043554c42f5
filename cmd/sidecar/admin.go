package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/settings"
)

// loggingHandler serves /logging on the admin listener: GET reads the level,
// POST /logging?level=debug changes it (like POST /drain: a GET must never
// change anything, so a crawler or a prefetching browser cannot).
func loggingHandler(level zap.AtomicLevel, log *zap.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			if r.URL.Query().Has("level") {
				w.Header().Set("Allow", "GET, HEAD, POST")
				http.Error(w, "GET only reads the level; change it with POST /logging?level=debug", http.StatusMethodNotAllowed)
				return
			}
			fmt.Fprintf(w, "level: %s\n", level.Level())
		case http.MethodPost:
			want := r.URL.Query().Get("level")
			lv, err := zap.ParseAtomicLevel(want)
			if want == "" || err != nil {
				http.Error(w, "level must be one of debug, info, warn, error: POST /logging?level=debug", http.StatusBadRequest)
				return
			}
			was := level.Level()
			level.SetLevel(lv.Level())
			log.Info("log level changed on the admin endpoint", zap.Stringer("from", was), zap.Stringer("to", lv.Level()))
			fmt.Fprintf(w, "level: %s (was %s)\n", level.Level(), was)
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			http.Error(w, "use GET /logging to read the level, POST /logging?level=debug to change it", http.StatusMethodNotAllowed)
		}
	}
}

// listenerError says which setting chose the consumer listener's address
// (--listen, the file, or the default) and, when the port is taken, how to
// find who holds it.
func listenerError(l settings.Layered, err error) error {
	addr := l.Settings.GetListener().GetAddress()
	var what string
	switch l.Sources["listener.address"] {
	case settings.SourceFile:
		what = fmt.Sprintf("listener.address %s (from %s; --listen overrides it)", addr, l.File)
	case settings.SourceFlag:
		what = "--listen " + addr
	default:
		what = fmt.Sprintf("--listen %s (the default)", addr)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		port := addr
		if _, p, e := net.SplitHostPort(addr); e == nil {
			port = p
		}
		return fmt.Errorf("%s: %w: another process listens there (ss -ltnp 'sport = :%s' shows which); pick a free address with --listen", what, err, port)
	}
	return fmt.Errorf("%s: %w", what, err)
}
