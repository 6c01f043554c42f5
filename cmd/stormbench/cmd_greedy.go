package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/loadgen"
)

func newGreedyCmd() *cobra.Command {
	cfg := loadgen.GreedyConfig{KeyBase: 1 << 60}
	var jsonPath string
	cmd := &cobra.Command{
		Use:   "greedy --target HOST:PORT [flags]",
		Short: "Run greedy neighbours: consumers that push large requests as fast as TCP lets them",
		Long: `greedy opens --conns connections and, on each, writes two-way requests of --size body bytes
back to back for --duration, with checked bodies (pair it with stormbench echo-provider). With
--read each connection reads and checks its answers (a bulk sender); without it, it never reads a
byte (a consumer that stopped reading, which a careful proxy closes once it has queued too much for it).

With --protocol triple the connections speak h2c (Triple, gRPC) to stormbench echo-provider --protocol
triple, and --size is the answer each call asks for (header stormbench-answer-size), not its request:
an HTTP/2 client that never reads cannot send more than its first flow-control windows, so what it
makes a proxy hold is answers. Each connection keeps up to 100 streams open; without --read it reads
the server's SETTINGS, opens them and never reads again (a PING every 250 ms shows when it was closed).

Run it beside a well-behaved stormbench load to measure what greedy neighbours cost the others
(make bench's greedy scenario does exactly that for direct, HAProxy and Stormgate). Body keys start
at 2^60, so they never collide with a load's. The summary goes to stderr; --json writes it for scripts.`,
		Example: `  # 20 consumers that never read, 256 KiB requests, for 15 s
  stormbench greedy --target 127.0.0.1:20881 --conns 20 --size 262144 --duration 15s

  # 20 bulk senders that read their answers
  stormbench greedy --target 127.0.0.1:20881 --conns 20 --size 262144 --read --duration 15s --json -

  # 20 h2c consumers that ask for 256 KiB answers and never read them
  stormbench greedy --protocol triple --target 127.0.0.1:50051 --conns 20 --size 262144 --duration 15s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Target == "" {
				return fmt.Errorf("--target is required (the provider, proxy or Stormgate to push at)")
			}
			start := time.Now()
			res, err := loadgen.Greedy(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "greedy: %d connections, %s in %v\n", cfg.Conns, res, time.Since(start).Round(time.Millisecond))
			if jsonPath == "" {
				return nil
			}
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			if jsonPath == "-" {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return err
			}
			return os.WriteFile(jsonPath, append(b, '\n'), 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Target, "target", "", "host:port to connect to (required)")
	f.IntVar(&cfg.Conns, "conns", 20, "greedy connections")
	f.IntVar(&cfg.Size, "size", 256<<10, "body bytes per request, 1 B..8 MiB (triple: per answer, 16 B..8 MiB)")
	f.BoolVar(&cfg.Read, "read", false, "read and check the answers (a bulk sender); without it, never read a byte")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to push, at most 30m")
	f.StringVar(&cfg.Protocol, "protocol", loadgen.ProtocolDubbo, "dubbo (Dubbo 2), or triple (h2c: --size is the answer each call asks for)")
	f.StringVar(&jsonPath, "json", "", "write the result as JSON to this file (- = stdout)")
	return cmd
}
