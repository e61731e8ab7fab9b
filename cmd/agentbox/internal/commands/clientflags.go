package commands

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

const defaultURL = client.DefaultURL

// globalFlags apply to every command.
func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "url",
			Usage:   "hostd's API address",
			Value:   defaultURL,
			Sources: cli.EnvVars("AGENTBOX_URL"),
		},
		&cli.StringFlag{
			Name:    "api-key",
			Usage:   "API key (default: read from $AGENTBOX_DATA_DIR/api-key); serve also accepts it",
			Sources: cli.EnvVars("AGENTBOX_API_KEY"),
		},
		&cli.BoolFlag{
			Name:  "json",
			Usage: "print machine-readable JSON (create, ls, exec, run)",
		},
	}
}

// newClient builds the API client from the global flags.
func newClient(cmd *cli.Command) (*client.Client, error) {
	key := cmd.String("api-key")
	if key == "" {
		var err error
		if key, err = client.LoadAPIKey(); err != nil {
			return nil, err
		}
	}
	return client.New(cmd.String("url"), key)
}

// printJSON writes v as indented JSON.
// printResult prints v as JSON with --json, and line (usually an id)
// otherwise: the output of every command that makes or changes one thing.
func printResult(cmd *cli.Command, v any, line ...any) error {
	if cmd.Bool("json") {
		return printJSON(stdout(cmd), v)
	}
	_, err := fmt.Fprintln(stdout(cmd), line...)
	return err
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// sandboxFlags are create's flags, shared with run.
func sandboxFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.IntFlag{Name: "vcpus", Usage: "virtual CPUs (default: hostd's)"},
		&cli.IntFlag{Name: "memory", Usage: "memory in MiB (default: hostd's)"},
		&cli.StringMapFlag{Name: "env", Usage: "environment of the sandbox's commands, `KEY=VALUE` (repeatable)"},
		&cli.StringMapFlag{Name: "metadata", Usage: "a label stored with the sandbox, `KEY=VALUE` (repeatable)"},
		&cli.DurationFlag{Name: "timeout", Usage: "delete the sandbox after this long (e.g. 30m; default: never)"},
		mountFlag(),
	}, append(limitFlags(), networkFlags()...)...)
}

func createRequest(cmd *cli.Command) (client.CreateSandboxRequest, error) {
	req := client.CreateSandboxRequest{
		VCPUs:     cmd.Int("vcpus"),
		MemoryMiB: cmd.Int("memory"),
		Env:       cmd.StringMap("env"),
		Metadata:  cmd.StringMap("metadata"),
	}
	if t := cmd.Duration("timeout"); t > 0 {
		req.TimeoutS = max(int(t.Seconds()), 1)
	} else if t < 0 {
		return req, fmt.Errorf("--timeout %v is negative", t)
	}
	setLimits(cmd, &req)
	var err error
	if req.Mounts, err = parseMounts(cmd.StringSlice("mount")); err != nil {
		return req, err
	}
	return req, applyNetworkFlags(cmd, &req)
}

// sortedKeys is for stable output of maps.
func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
