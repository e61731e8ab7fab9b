package commands

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// mountFlag is create's and run's --mount.
func mountFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "mount", Usage: "mount a host directory, `SOURCE:PATH[:ro]` (under hostd's --mount-root), or any mount as its JSON object, e.g. '{\"type\":\"s3\",\"endpoint\":\"https://…\",\"bucket\":\"b\",\"secret\":\"s3-keys\",\"path\":\"/data\"}' (repeatable)"}
}

// parseMounts parses --mount values: SOURCE:PATH, then optionally :ro or :rw;
// or a JSON object (the API's Mount) for any type.
func parseMounts(ss []string) ([]client.Mount, error) {
	var out []client.Mount
	for _, s := range ss {
		if strings.HasPrefix(strings.TrimSpace(s), "{") {
			var m client.Mount
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				return nil, fmt.Errorf("--mount %q: %w", s, err)
			}
			out = append(out, m)
			continue
		}
		parts := strings.Split(s, ":")
		m := client.Mount{Type: client.MountTypeHost}
		switch {
		case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
			m.ReadOnly = parts[2] == "ro"
		case len(parts) != 2:
			return nil, fmt.Errorf("--mount %q: want SOURCE:PATH[:ro]", s)
		}
		m.Source, m.Path = parts[0], parts[1]
		if m.Source == "" || m.Path == "" {
			return nil, fmt.Errorf("--mount %q: want SOURCE:PATH[:ro]", s)
		}
		out = append(out, m)
	}
	return out, nil
}
