// Command undoc keeps generated Go files from supplying their package's doc
// comment: it puts a blank line between the comment block that a generator
// wrote just above the package clause and that clause, so `go doc` shows
// the package's hand-written doc.go instead. It runs after each generator
// in `go generate` (see hostd/api/doc.go, client/doc.go and
// proto/agent/v1/gen.go); the "Code generated ... DO NOT EDIT." line stays.
//
// Usage: undoc FILE...
package main

import (
	"bytes"
	"fmt"
	"os"
)

func main() {
	for _, path := range os.Args[1:] {
		if err := undoc(path); err != nil {
			fmt.Fprintln(os.Stderr, "undoc:", err)
			os.Exit(1)
		}
	}
}

func undoc(path string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := bytes.SplitAfter(src, []byte("\n"))
	for i, l := range lines {
		if !bytes.HasPrefix(l, []byte("package ")) {
			continue
		}
		if i == 0 || !bytes.HasPrefix(lines[i-1], []byte("//")) {
			return nil // no doc comment
		}
		out := bytes.Join(lines[:i], nil)
		out = append(out, '\n')
		out = append(out, bytes.Join(lines[i:], nil)...)
		return os.WriteFile(path, out, 0o644)
	}
	return fmt.Errorf("%s: no package clause", path)
}
