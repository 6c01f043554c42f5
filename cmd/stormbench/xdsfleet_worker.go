package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
)

// Fleet worker protocol, one JSON value per line.
//
//	parent → worker stdin:  the fleetWorkerConfig; EOF stops the worker (its clients end).
//	worker → parent stdout: {"t":"started"} once every client runs, then batches of events
//	                        {"t":"ev","e":[...]} as they happen (flushed every 20 ms).
type fleetWorkerConfig struct {
	Addresses   []string      `json:"addresses"`
	From        int           `json:"from"` // node indexes [From, To)
	To          int           `json:"to"`
	Namespaces  int           `json:"namespaces"`
	Apps        int           `json:"apps"`
	ConnectRate float64       `json:"connect_rate"` // this worker's share, clients started per second; 0 = all at once
	BackoffBase time.Duration `json:"backoff_base"` // 0 = the client's default
	BackoffMax  time.Duration `json:"backoff_max"`
}

// fleetEvent is something one node's client did, timestamped by the worker.
type fleetEvent struct {
	Node int    `json:"n"`
	Kind string `json:"k"`  // "up" (stream up, V = address), "down", "apply" (V = version), "nack" (V = version)
	At   int64  `json:"at"` // Unix nanoseconds
	V    string `json:"v,omitempty"`
}

type fleetWorkerMsg struct {
	T string       `json:"t"`
	E []fleetEvent `json:"e,omitempty"`
}

func newFleetWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "xds-fleet-worker",
		Short:  "internal: one worker process of `stormbench xds-fleet` (reads its config on stdin)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			signal.Ignore(os.Interrupt) // the parent decides: it closes our stdin
			return runFleetWorker(os.Stdin, os.Stdout)
		},
	}
}

// fleetNode is node i of a fleet: the same in the parent (expected settings) and the workers.
func fleetNode(i, namespaces, apps int) xds.NodeInfo {
	ns := fmt.Sprintf("ns-%d", i/apps%namespaces) // independent of the app: namespaces x apps classes
	return xds.NodeInfo{
		ID:        fmt.Sprintf("fleet-%05d.%s", i, ns),
		Namespace: ns,
		Labels:    map[string]string{"app": fmt.Sprintf("app-%d", i%apps), "pod-template-hash": "5d8f7c9b4"},
		Ports:     xds.ProviderPorts(settings.Defaults()), // what a sidecar with the default upstream reports
	}
}

func runFleetWorker(in io.Reader, out io.Writer) error {
	br := bufio.NewReader(in)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("xds-fleet worker: reading config: %w", err)
	}
	var cfg fleetWorkerConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("xds-fleet worker: config: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, br); cancel() }() // EOF: the parent is done

	events := make(chan fleetEvent, 1<<16)
	var enc sync.Mutex
	w := json.NewEncoder(out)
	send := func(m fleetWorkerMsg) {
		enc.Lock()
		defer enc.Unlock()
		_ = w.Encode(m)
	}
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var batch []fleetEvent
		for {
			select {
			case e, ok := <-events:
				if !ok {
					if len(batch) > 0 {
						send(fleetWorkerMsg{T: "ev", E: batch})
					}
					return
				}
				batch = append(batch, e)
			case <-tick.C:
				if len(batch) > 0 {
					send(fleetWorkerMsg{T: "ev", E: batch})
					batch = nil
				}
			}
		}
	}()
	emit := func(e fleetEvent) {
		e.At = time.Now().UnixNano()
		events <- e
	}

	var wg sync.WaitGroup
	var interval time.Duration
	if cfg.ConnectRate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.ConnectRate)
	}
	start := time.Now()
	for i := cfg.From; i < cfg.To; i++ {
		if interval > 0 {
			if d := time.Until(start.Add(time.Duration(i-cfg.From) * interval)); d > 0 {
				time.Sleep(d)
			}
		}
		if ctx.Err() != nil {
			break
		}
		var prev xds.Status
		// Each node checks and keeps what it is pushed, as a sidecar does (its stages aside).
		st, err := settings.NewStore(settings.Defaults(), "startup", settings.SourceDefaults, nil)
		if err != nil {
			return err
		}
		c, err := xds.NewClient(xds.ClientConfig{
			Addresses: cfg.Addresses, Node: fleetNode(i, cfg.Namespaces, cfg.Apps),
			BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
			OnStatus: func(s xds.Status) {
				switch {
				case s.Connected && !prev.Connected:
					emit(fleetEvent{Node: i, Kind: "up", V: s.Server})
				case !s.Connected && prev.Connected:
					emit(fleetEvent{Node: i, Kind: "down"})
				}
				if s.Rejected != "" && s.Rejected != prev.Rejected {
					emit(fleetEvent{Node: i, Kind: "nack", V: s.Rejected})
				}
				prev = s
			},
		}, nil, nil)
		if err != nil {
			return err
		}
		wg.Go(func() {
			_ = c.Run(ctx, func(pushed *sg.Settings, version string) error {
				if err := st.Update(settings.Merge(st.Base().Settings, pushed), version, settings.SourceXDS, nil); err != nil {
					return err
				}
				emit(fleetEvent{Node: i, Kind: "apply", V: version})
				return nil
			})
		})
	}
	send(fleetWorkerMsg{T: "started"})
	wg.Wait()
	close(events)
	<-flushed
	return nil
}
