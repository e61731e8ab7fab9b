package api

import "encoding/base64"

// defaultListLimit is a listing page's entries when the request sets no limit.
const defaultListLimit = 1000

// A listing's cursor is the last entry's name bytes (the guest sorts by
// them), base64url without padding: opaque to clients, and any bytes.
func encodeListCursor(name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(name))
}

func decodeListCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 {
		return "", badRequest(CodeInvalidParam, "cursor %q is not a listing's next_cursor", c)
	}
	return string(b), nil
}
