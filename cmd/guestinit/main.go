// Command guestinit is the sandbox guest's PID 1 (see package guestinit).
package main

import "github.com/agentbox/agentbox/guestinit"

func main() { guestinit.Main() }
