package commands

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// networkFlags are create's and run's egress policy flags.
func networkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "network", Usage: "proxy (a NIC behind the egress proxy; the default) or none (no NIC)"},
		&cli.StringSliceFlag{Name: "allow-domain", Usage: "allow egress to `NAME` (exact, *.suffix, or *; repeatable)"},
		&cli.StringSliceFlag{Name: "allow-cidr", Usage: "allow direct connections to `CIDR` (repeatable)"},
		&cli.StringSliceFlag{Name: "allow-port", Usage: "allowed destination `PORT` (repeatable; default 80 and 443)"},
		&cli.StringSliceFlag{Name: "inject", Usage: "credential rule `HOST:HEADER=VALUE`, e.g. 'api.github.com:Authorization=Bearer {{secret:gh}}' (repeatable)"},
		&cli.StringMapFlag{Name: "secret-env", Usage: "give the guest a placeholder for a secret, `VAR=SECRET` (repeatable)"},
	}
}

// applyNetworkFlags sets req's network policy from the flags.
func applyNetworkFlags(cmd *cli.Command, req *client.CreateSandboxRequest) error {
	ports, err := parsePorts(cmd.StringSlice("allow-port"))
	if err != nil {
		return err
	}
	inject, err := parseInjects(cmd.StringSlice("inject"))
	if err != nil {
		return err
	}
	req.SecretEnv = cmd.StringMap("secret-env")
	mode := cmd.String("network")
	if mode == "" && len(ports)+len(inject)+len(cmd.StringSlice("allow-domain"))+len(cmd.StringSlice("allow-cidr")) == 0 {
		return nil
	}
	req.Network = &client.NetworkPolicyInput{
		AllowDomains: cmd.StringSlice("allow-domain"), AllowCidrs: cmd.StringSlice("allow-cidr"),
		AllowPorts: ports, Inject: inject,
	}
	if mode != "" {
		m := client.NetworkMode(mode)
		req.Network.Mode = &m
	}
	return nil
}

func parsePorts(ss []string) ([]int, error) {
	var out []int
	for _, s := range ss {
		if s == "" {
			continue
		}
		p, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("--allow-port %q: %w", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseInjects(ss []string) ([]client.InjectRule, error) {
	var out []client.InjectRule
	for _, s := range ss {
		host, rest, ok1 := strings.Cut(s, ":")
		header, value, ok2 := strings.Cut(rest, "=")
		if !ok1 || !ok2 || host == "" || header == "" {
			return nil, fmt.Errorf("--inject %q: want HOST:HEADER=VALUE", s)
		}
		out = append(out, client.InjectRule{Host: host, Header: header, Value: value})
	}
	return out, nil
}

func networkCommand() *cli.Command {
	return &cli.Command{
		Name:  "network",
		Usage: "show or change a sandbox's egress policy",
		Commands: []*cli.Command{
			{
				Name: "show", Usage: "print the policy", UsageText: "agentbox network show ID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					c, id, err := clientAndID(cmd)
					if err != nil {
						return err
					}
					p, err := c.NetworkPolicy(ctx, id)
					if err != nil {
						return err
					}
					return printJSON(stdout(cmd), p)
				},
			},
			{
				Name: "set", Usage: "replace the fields given (others stay); applies at once",
				UsageText: "agentbox network set ID [--allow-domain NAME]... [--allow-cidr CIDR]... [--allow-port N]... [--inject HOST:HEADER=VALUE]...\n" +
					"(give a flag once with an empty value to clear that field)",
				Flags:                     networkFlags()[1:5],
				DisableSliceFlagSeparator: true,
				Action:                    networkSet,
			},
		},
	}
}

func networkSet(ctx context.Context, cmd *cli.Command) error {
	c, id, err := clientAndID(cmd)
	if err != nil {
		return err
	}
	var patch client.NetworkPolicyPatch
	nonEmpty := func(ss []string) []string {
		out := []string{}
		for _, s := range ss {
			if s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	if cmd.IsSet("allow-domain") {
		d := nonEmpty(cmd.StringSlice("allow-domain"))
		patch.AllowDomains = &d
	}
	if cmd.IsSet("allow-cidr") {
		d := nonEmpty(cmd.StringSlice("allow-cidr"))
		patch.AllowCidrs = &d
	}
	if cmd.IsSet("allow-port") {
		p, err := parsePorts(cmd.StringSlice("allow-port"))
		if err != nil {
			return err
		}
		if p == nil {
			p = []int{}
		}
		patch.AllowPorts = &p
	}
	if cmd.IsSet("inject") {
		r, err := parseInjects(nonEmpty(cmd.StringSlice("inject")))
		if err != nil {
			return err
		}
		if r == nil {
			r = []client.InjectRule{}
		}
		patch.Inject = &r
	}
	p, err := c.PatchNetwork(ctx, id, patch)
	if err != nil {
		return err
	}
	return printJSON(stdout(cmd), p)
}

// clientAndID returns the client and the one sandbox id argument.
func clientAndID(cmd *cli.Command) (*client.Client, string, error) {
	if cmd.Args().Len() != 1 {
		return nil, "", &UsageError{Err: errors.New("give one sandbox id")}
	}
	c, err := newClient(cmd)
	return c, cmd.Args().First(), err
}
