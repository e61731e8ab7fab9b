# The fleet on one machine (issue 39), included by the top-level Makefile.
#
# make fleet      starts PostgreSQL, three hostds each in a network
#                 namespace of its own and two control-plane replicas
#                 (ci/fleet), prints AGENTBOX_URL and AGENTBOX_API_KEY, and
#                 runs until Ctrl-C, removing everything. Needs root.
# make fleet-sim  the placement simulation against a real PostgreSQL: 100
#                 simulated hosts, 10,000 sandboxes, 10 hosts dying at once
#                 (ci/fleetsim); FLEETSIM_FLAGS passes more flags.

fleet_mk_default_goal := $(.DEFAULT_GOAL)

.PHONY: fleet fleet-sim

fleet: assets build
	go run ./ci/fleet --bin bin $(FLEET_FLAGS)

fleet-sim:
	go run ./ci/fleetsim $(FLEETSIM_FLAGS)

.DEFAULT_GOAL := $(fleet_mk_default_goal)
