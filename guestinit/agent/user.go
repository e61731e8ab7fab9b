package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/user"
)

// maxUserFile bounds how much of /etc/passwd and /etc/group a start reads.
const maxUserFile = 4 << 20

// maxUserSpec bounds a StartRequest's user.
const maxUserSpec = 256

// execUser is who a process runs as.
type execUser struct {
	cred *syscall.Credential // nil: the agent's own (root)
	name string              // "" when /etc/passwd does not name the uid
	home string
}

// resolveUser resolves an image USER spec ("name", "uid", "name:group",
// "uid:gid") against the passwd and group files under etc, as Docker does
// (github.com/moby/sys/user): a uid absent from passwd runs with gid 0 and
// HOME /; an unknown name or group is an error. "" is root as the agent is.
func resolveUser(spec, etc string) (execUser, error) {
	root := execUser{name: "root", home: BaseEnv["HOME"]}
	if spec == "" {
		return root, nil
	}
	if len(spec) > maxUserSpec || strings.ContainsAny(spec, "\x00\n") || strings.Count(spec, ":") > 1 {
		return execUser{}, fmt.Errorf("%w: bad user %q", errBadArgs, truncate(spec, 64))
	}
	passwd := openBounded(filepath.Join(etc, "passwd"))
	defer passwd.close()
	group := openBounded(filepath.Join(etc, "group"))
	defer group.close()
	u, err := user.GetExecUser(spec, &user.ExecUser{Home: "/"}, passwd.reader(), group.reader())
	if err != nil {
		if spec == "root" {
			return root, nil // an image whose /etc/passwd lacks root still has it
		}
		return execUser{}, fmt.Errorf("%w: user %q: %v", errBadArgs, truncate(spec, 64), err)
	}
	if u.Uid == 0 && u.Gid == 0 && len(u.Sgids) == 0 {
		return root, nil
	}
	out := execUser{home: u.Home, name: userName(u.Uid, etc), cred: &syscall.Credential{Uid: uint32(u.Uid), Gid: uint32(u.Gid)}}
	for _, g := range u.Sgids {
		out.cred.Groups = append(out.cred.Groups, uint32(g))
	}
	return out, nil
}

// userName is the passwd name of uid, or "".
func userName(uid int, etc string) string {
	f := openBounded(filepath.Join(etc, "passwd"))
	defer f.close()
	r := f.reader()
	if r == nil {
		return ""
	}
	users, err := user.ParsePasswdFilter(r, func(u user.User) bool { return u.Uid == uid })
	if err != nil || len(users) == 0 {
		return ""
	}
	return users[0].Name
}

// boundedFile is a file read up to maxUserFile bytes, or absent.
type boundedFile struct{ f *os.File }

func openBounded(p string) boundedFile {
	f, err := os.Open(p)
	if err != nil {
		return boundedFile{}
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return boundedFile{}
	}
	return boundedFile{f: f}
}

func (b boundedFile) reader() io.Reader {
	if b.f == nil {
		return nil
	}
	return io.LimitReader(b.f, maxUserFile)
}

func (b boundedFile) close() {
	if b.f != nil {
		b.f.Close()
	}
}

// applyUser makes cmd run as u: its credentials, and HOME, USER and
// LOGNAME unless the request set them, and the home as the default
// working directory.
func applyUser(cmd *exec.Cmd, u execUser, reqEnv map[string]string, cwdGiven bool) {
	if u.cred == nil {
		return
	}
	cmd.SysProcAttr.Credential = u.cred
	set := func(k, v string) {
		if _, ok := reqEnv[k]; ok || v == "" {
			return
		}
		for i, kv := range cmd.Env {
			if strings.HasPrefix(kv, k+"=") {
				cmd.Env[i] = k + "=" + v
				return
			}
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	name := u.name
	if name == "" {
		name = strconv.FormatUint(uint64(u.cred.Uid), 10)
	}
	set("HOME", u.home)
	set("USER", name)
	set("LOGNAME", name)
	sort.Strings(cmd.Env)
	if !cwdGiven {
		cmd.Dir = u.home
		if fi, err := os.Stat(u.home); err != nil || !fi.IsDir() {
			cmd.Dir = "/"
		}
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
