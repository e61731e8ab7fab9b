package watch

import (
	"bufio"
	"io"
	"os"
	"slices"
	"strings"
)

// WritableMounts returns "/" and the other writable mount points listed in
// a /proc/self/mounts-format file, skipping those under ignore: the paths
// to watch in a guest. The root comes first even when it is not listed.
func WritableMounts(mountsFile string, ignore []string) []string {
	f, err := os.Open(mountsFile)
	if err != nil {
		return []string{"/"}
	}
	defer f.Close()
	return parseWritableMounts(f, ignore)
}

func parseWritableMounts(r io.Reader, ignore []string) []string {
	out := []string{"/"}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !slices.Contains(strings.Split(f[3], ","), "rw") {
			continue
		}
		mp := unescapeMount(f[1])
		if slices.Contains(out, mp) || underAny(mp, ignore) {
			continue
		}
		out = append(out, mp)
	}
	return out
}

func underAny(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// unescapeMount undoes the octal escapes (\040 for a space) of mounts files.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, ok := octal(s[i+1 : i+4]); ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal(s string) (byte, bool) {
	if len(s) != 3 {
		return 0, false
	}
	var v int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v*8 + int(c-'0')
	}
	return byte(v), v < 256
}
