// Package gateway is `agentbox gateway`: the fleet's control plane in the
// foreground (fleet/gateway), serving hostd's API in front of every host
// of the fleet's database, until SIGINT or SIGTERM.
package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	fleetgw "github.com/agentbox/agentbox/fleet/gateway"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
)

// DefaultListen is the gateway's default address.
const DefaultListen = "127.0.0.1:7080"

// Command returns the gateway command.
func Command() *cli.Command {
	return &cli.Command{
		Name:  "gateway",
		Usage: "run the fleet's control plane: hostd's API in front of many hosts, on PostgreSQL",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: DefaultListen, Usage: "API address", Sources: cli.EnvVars("AGENTBOX_GATEWAY_LISTEN")},
			&cli.StringFlag{Name: "fleet-db", Usage: "the fleet's PostgreSQL `DSN` (postgres://…)", Sources: cli.EnvVars("AGENTBOX_FLEET_DB")},
			&cli.StringFlag{Name: "fleet-secret-file", Usage: "`FILE` holding the fleet secret that host tokens derive from (AGENTBOX_FLEET_SECRET: the value itself)"},
			&cli.StringFlag{Name: "secrets-key-file", Usage: "`FILE` holding the key that seals secrets at rest (AGENTBOX_SECRETS_KEY: the value itself; none: no secrets)"},
			&cli.StringFlag{Name: "admin-key-file", Usage: "with no admin key in the fleet, make one and write it to this `FILE` (AGENTBOX_API_KEY: use that key instead)",
				Sources: cli.EnvVars("AGENTBOX_GATEWAY_ADMIN_KEY_FILE")},
			&cli.StringFlag{Name: "domain", Usage: "route host-based service URLs {port}-{sandbox}.DOMAIN (the hosts' --domain)", Sources: cli.EnvVars("AGENTBOX_DOMAIN")},
			&cli.DurationFlag{Name: "lease-ttl", Value: 10e9, Usage: "hosts' lease: a host silent this long is dead", Sources: cli.EnvVars("AGENTBOX_FLEET_LEASE_TTL")},
			&cli.IntFlag{Name: "placement-k", Value: 3, Usage: "placement compares the best of K random hosts that fit", Sources: cli.EnvVars("AGENTBOX_PLACEMENT_K")},
			&cli.StringFlag{Name: "snapshot-store", Usage: "the hosts' shared snapshot store `URL` (s3://bucket/prefix?endpoint=…, their --snapshot-store): paused sandboxes resume on any host, sandboxes migrate and drain, and the leader collects unreferenced chunks",
				Sources: cli.EnvVars("AGENTBOX_SNAPSHOT_STORE")},
			&cli.StringFlag{Name: "snapshot-store-credentials", Usage: "`FILE` with the store's access key and secret key (two lines or KEY=VALUE; else AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"},
			&cli.DurationFlag{Name: "chunk-gc-every", Value: 10 * time.Minute, Usage: "how often the leader deletes chunks no snapshot references"},
			&cli.IntFlag{Name: "default-memory-mib", Value: 512, Usage: "memory of a create that does not say (the hosts' default)", Sources: cli.EnvVars("AGENTBOX_GATEWAY_DEFAULT_MEMORY_MIB")},
		},
		Action: run,
	}
}

func run(ctx context.Context, cmd *cli.Command) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	dsn := cmd.String("fleet-db")
	if dsn == "" {
		return fmt.Errorf("gateway: --fleet-db (AGENTBOX_FLEET_DB) names the fleet's database")
	}
	secret, err := hosttoken.Secret(os.Getenv("AGENTBOX_FLEET_SECRET"), cmd.String("fleet-secret-file"))
	if err != nil {
		return fmt.Errorf("gateway: %w (set AGENTBOX_FLEET_SECRET or --fleet-secret-file)", err)
	}
	var sealKey []byte
	if v := os.Getenv("AGENTBOX_SECRETS_KEY"); v != "" {
		sealKey = []byte(strings.TrimSpace(v))
	} else if f := cmd.String("secrets-key-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("gateway: secrets key: %w", err)
		}
		sealKey = []byte(strings.TrimSpace(string(b)))
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer st.Close()
	leader := newLeader(st, secret, cmd.Duration("lease-ttl"), log)
	portable := cmd.String("snapshot-store") != ""
	if portable {
		collect, err := chunkCollector(cmd.String("snapshot-store"), cmd.String("snapshot-store-credentials"), st)
		if err != nil {
			return fmt.Errorf("gateway: --snapshot-store: %w", err)
		}
		leader.Collect, leader.CollectEvery = collect, cmd.Duration("chunk-gc-every")
	}
	g, err := fleetgw.New(fleetgw.Config{Store: st, Secret: secret, SecretsKey: sealKey, Domain: cmd.String("domain"),
		LeaseTTL: cmd.Duration("lease-ttl"), K: int(cmd.Int("placement-k")), DefaultMemoryMiB: int(cmd.Int("default-memory-mib")),
		AdminKeyFile: cmd.String("admin-key-file"), Logger: log, Leader: leader, Portable: portable})
	if err != nil {
		return err
	}
	if err := g.Bootstrap(ctx, os.Getenv("AGENTBOX_API_KEY")); err != nil {
		return err
	}
	l, err := net.Listen("tcp", cmd.String("listen"))
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	return g.Serve(ctx, l)
}
