"""Links between pubmesh nodes: routes within a cluster and gateways between clusters."""
