// Command layout writes a one-layer OCI layout directory from a tar of a
// root tree (images/build-template.sh uses it); see oci.WriteLayout.
//
//	layout -layer ROOT.tar[.zst] -out DIR [-env K=V]... [-workdir D] [-user U] [-cmd JSON] [-entrypoint JSON]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/images/oci"
)

type list []string

func (l *list) String() string     { return fmt.Sprint(*l) }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var cfg v1.Config
	var env list
	layer := flag.String("layer", "", "the layer: a tar file (plain, gzip or zstd)")
	out := flag.String("out", "", "the OCI layout directory to write (must not exist)")
	cmd := flag.String("cmd", "", "the image's Cmd, a JSON array")
	ep := flag.String("entrypoint", "", "the image's Entrypoint, a JSON array")
	flag.Var(&env, "env", "an environment variable K=V of the image (repeatable)")
	flag.StringVar(&cfg.WorkingDir, "workdir", "", "the image's working directory")
	flag.StringVar(&cfg.User, "user", "", "the image's default user")
	flag.Parse()
	if err := run(&cfg, env, *layer, *out, *cmd, *ep); err != nil {
		fmt.Fprintln(os.Stderr, "layout:", err)
		os.Exit(1)
	}
}

func run(cfg *v1.Config, env []string, layer, out, cmd, ep string) error {
	if layer == "" || out == "" {
		return fmt.Errorf("-layer and -out are required")
	}
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("%s exists", out)
	}
	cfg.Env = env
	for _, a := range []struct {
		s   string
		dst *[]string
	}{{cmd, &cfg.Cmd}, {ep, &cfg.Entrypoint}} {
		if a.s != "" {
			if err := json.Unmarshal([]byte(a.s), a.dst); err != nil {
				return fmt.Errorf("%q is not a JSON array of strings: %w", a.s, err)
			}
		}
	}
	id, err := oci.WriteLayout(out, layer, *cfg)
	if err != nil {
		return err
	}
	fmt.Println(id)
	return nil
}
