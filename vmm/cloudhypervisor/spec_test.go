package cloudhypervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"regexp"
	"testing"
)

// TestSpecIsThePinnedCopy checks the spec copy against the sha256 that its
// SOURCE.md records, so that an edit to the spec cannot pass unnoticed.
func TestSpecIsThePinnedCopy(t *testing.T) {
	source, err := os.ReadFile("spec/SOURCE.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("\\| sha256 \\| `([0-9a-f]{64})` \\|").FindSubmatch(source)
	if m == nil {
		t.Fatal("spec/SOURCE.md records no sha256")
	}
	b, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != string(m[1]) {
		t.Fatalf("%s: sha256 %s, SOURCE.md pins %s", specPath, got, m[1])
	}
}
