//go:build race

package client_test

// raceEnabled shrinks the streaming test: the race detector makes each
// byte of JSON and base64 costly.
const raceEnabled = true
